// scheduler_sim: how the real coordinator's placement scales with cluster
// size, by simulation. One process, one actor system: the real node
// registry and coordinator, and N simulated node agents (typed actors that
// implement proto::node_agent over fake resources, answering in-process).
//
// placement_ms: from sending `start` to the coordinator until the last
// simulated agent received its `colocate` (the coordinator has listed the
// nodes, planned, reserved all-or-nothing on every node and asked every node
// to start its workers). The peer column, measured in the same run on the
// same node list, is plan_placement() alone (placement.hpp, no actors), so
// the table shows what share of placement is actor messaging.
//
//   scheduler_sim [--nodes 100,1000,10000] [--cpus 8] [--reps 3]
//                 [--threads 0] [--no-updates] [--timeout 120] [--mem-limit-gb 12]

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <cxxopts.hpp>
#include <fmt/format.h>

#include "actors/coordinator/coordinator.hpp"
#include "actors/protocol/interfaces.hpp"
#include "actors/node/node_registry.hpp"
#include "actors/placement/placement.hpp"
#include "actors/protocol/system_config.hpp"

#include "sim_node_agent.hpp"
#include "bench_method.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;


namespace {

using namespace hvactor::proto;
using hvactor::bench::now_ns;
using hvactor::bench::sim_stats;

// -- measurement ------------------------------------------------------------

struct cluster {
  node_registry registry;
  std::vector<node_agent> agents;
  std::vector<hvactor::node_resources> resources; // registry order
};

cluster make_cluster(caf::actor_system& sys, sim_stats& stats, int nodes, int cpus,
                     bool updates, double& join_ms) {
  cluster c;
  c.registry = hvactor::spawn_node_registry(sys);
  caf::scoped_actor self{sys};
  auto t0 = clock_type::now();
  for (int i = 0; i < nodes; ++i) {
    node_info info;
    info.node_id = fmt::format("node-{:05}", i);
    info.hostname = info.node_id;
    info.address = "127.0.0.1";
    info.port = 0; // in-process: reached by its handle
    info.caches_binaries = false;
    info.total = {cpus, 0};
    info.free = {cpus, 0};
    auto agent = hvactor::bench::spawn_sim_node_agent(sys, info, &stats, c.registry, updates);
    self->request(c.registry, 30s, join_atom_v, info, agent)
      .receive([](bool) {},
               [&](caf::error& err) {
                 std::fprintf(stderr, "join of %s failed: %s\n", info.node_id.c_str(),
                              hvactor::describe(err).c_str());
               });
    c.agents.push_back(agent);
    c.resources.push_back({info.node_id, cpus, 0, cpus, 0});
  }
  join_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  return c;
}

// Waits until the registry lists every node with all its CPUs free (the
// agents' update messages of the previous repetition have drained).
bool wait_all_free(caf::actor_system& sys, const cluster& c, int cpus, double& list_ms) {
  caf::scoped_actor self{sys};
  for (int attempt = 0; attempt < 600; ++attempt) {
    bool all_free = false;
    auto t0 = clock_type::now();
    self->request(c.registry, 30s, list_atom_v)
      .receive(
        [&](const cluster_view& view) {
          all_free = view.nodes.size() == c.agents.size()
                     && std::all_of(view.nodes.begin(), view.nodes.end(),
                                    [&](const node_info& n) { return n.free.cpus == cpus; });
        },
        [](caf::error&) {});
    list_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (all_free)
      return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

struct strategy {
  const char* name;
  hvactor::executor_options options;
  hvactor::placement_request request;
};

// One placement by the real coordinator; <0 when it did not finish in time
// (`died`: the coordinator's exit reason when it went down meanwhile).
double place_once(caf::actor_system& sys, const cluster& c, sim_stats& stats,
                  const strategy& s, const std::string& job, std::chrono::seconds timeout,
                  std::string& died) {
  hvactor::coordinator_config cfg;
  cfg.job_id = job;
  cfg.settings.timeout = timeout;
  cfg.settings.placement_timeout = timeout;
  cfg.options = s.options;
  cfg.registry = c.registry;
  cfg.executable = "/bin/true";
  cfg.args = {"/bin/true"};
  stats.reset();
  auto coord = hvactor::spawn_coordinator(sys, cfg);
  auto expected = static_cast<int>(c.agents.size());
  auto t0 = now_ns();
  // Answered only once workers register, which never happens here.
  caf::anon_send(coord, start_atom_v, std::string{"127.0.0.1:1"}, std::string{"127.0.0.1"},
                 uint16_t{1});
  auto deadline = clock_type::now() + timeout;
  {
    // Polls the agents' counter; a coordinator that dies (e.g. bad_alloc)
    // ends the wait at once.
    caf::scoped_actor watcher{sys};
    watcher->monitor(coord);
    bool dead = false;
    while (!dead && stats.colocates.load() < expected && clock_type::now() < deadline)
      watcher->receive(
        [&](caf::down_msg& dm) {
          dead = true;
          died = caf::to_string(dm.reason);
        },
        caf::after(200us) >> [] {});
  }
  double ms = stats.colocates.load() >= expected ? (stats.last_colocate_ns.load() - t0) / 1e6
                                                 : -1.0;
  {
    caf::scoped_actor self{sys};
    self->request(coord, timeout, shutdown_atom_v)
      .receive([](bool) {},
               [&](caf::error& err) {
                 if (died.empty())
                   std::fprintf(stderr, "shutdown of %s failed: %s\n", job.c_str(),
                                hvactor::describe(err).c_str());
               });
    // Leave every agent free for the next repetition, whatever the
    // coordinator released.
    for (auto& agent : c.agents)
      self->send(agent, release_atom_v, job);
  }
  caf::anon_send_exit(coord, caf::exit_reason::user_shutdown);
  return ms;
}

double plan_only_ms(const strategy& s, const std::vector<hvactor::node_resources>& nodes) {
  auto t0 = clock_type::now();
  auto plan = hvactor::plan_placement(s.request, nodes);
  double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  return plan ? ms : -1.0;
}

using hvactor::bench::median;

std::vector<int> parse_list(const std::string& text) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    auto comma = text.find(',', pos);
    auto item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!item.empty())
      out.push_back(std::stoi(item));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

// Peak resident memory of this process so far.
double peak_rss_mb() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024;
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string ms_cell(double ms) {
  return ms < 0 ? std::string{"timeout"} : fmt::format("{:.1f}", ms);
}

} // namespace

/// The command line.
struct sim_config {
  std::vector<int> sizes;
  int cpus = 8, reps = 3;
  bool updates = true;
  std::chrono::seconds timeout{120};
  int mem_limit_gb = 12;
  size_t threads = 0;
};

// The options; nullopt after --help.
std::optional<sim_config> read_config(int argc, char** argv) {
  cxxopts::Options parser{"scheduler_sim", "placement time of the real coordinator over N "
                                           "simulated node agents"};
  // clang-format off
  parser.add_options()
    ("nodes", "comma-separated cluster sizes", cxxopts::value<std::string>()->default_value("100,1000,10000"))
    ("cpus", "CPUs (slots) per simulated node", cxxopts::value<int>()->default_value("8"))
    ("reps", "repetitions per size and strategy", cxxopts::value<int>()->default_value("3"))
    ("threads", "scheduler threads (0: hvactor's default)", cxxopts::value<size_t>()->default_value("0"))
    ("no-updates", "agents do not send update_atom to the registry on reserve/release")
    ("timeout", "seconds one placement may take", cxxopts::value<int>()->default_value("120"))
    ("mem-limit-gb", "address-space cap of this process (RLIMIT_AS), so that a placement that "
                     "blows up fails as bad_alloc instead of exhausting a shared machine; 0: none",
     cxxopts::value<int>()->default_value("12"))
    ("h,help", "print this help");
  // clang-format on
  auto opts = parser.parse(argc, argv);
  if (opts.count("help")) {
    std::printf("%s\n", parser.help().c_str());
    return std::nullopt;
  }
  sim_config o;
  o.sizes = parse_list(opts["nodes"].as<std::string>());
  o.cpus = opts["cpus"].as<int>();
  o.reps = std::max(1, opts["reps"].as<int>());
  o.updates = opts.count("no-updates") == 0;
  o.timeout = std::chrono::seconds(opts["timeout"].as<int>());
  o.mem_limit_gb = opts["mem-limit-gb"].as<int>();
  o.threads = opts["threads"].as<size_t>();
  return o;
}

// PACK (n x cpus workers) and SPREAD (n hosts x cpus) over n nodes.
std::vector<strategy> strategies_for(int n, int cpus) {
  std::vector<strategy> strategies;
  strategy pack{"PACK", {}, {}};
  pack.options.num_workers = n * cpus;
  pack.request.num_workers = n * cpus;
  strategies.push_back(pack);
  strategy spread{"SPREAD", {}, {}};
  spread.options.num_hosts = n;
  spread.options.num_workers_per_host = cpus;
  spread.request.num_hosts = n;
  spread.request.workers_per_host = cpus;
  strategies.push_back(spread);
  return strategies;
}

// `reps` placements of `s` on the cluster of n nodes, one table row.
void run_strategy(caf::actor_system& sys, cluster& c, sim_stats& stats, const strategy& s,
                  int n, const sim_config& o) {
  int cpus = o.cpus, reps = o.reps;
  auto timeout = o.timeout;
  double list_ms = 0;
  std::vector<double> placed, planned;
  bool failed = false;
  std::string failure;
  for (int r = 0; r < reps; ++r) {
    auto job = fmt::format("sim-{}-{}-{}", s.name, n, r);
    std::string died;
    double ms = place_once(sys, c, stats, s, job, timeout, died);
    if (ms < 0) {
      failure = died.empty() ? fmt::format("no placement within {} s", timeout.count())
                             : "coordinator died: " + died;
      failed = true;
      break;
    }
    placed.push_back(ms);
    planned.push_back(plan_only_ms(s, c.resources));
    if (!wait_all_free(sys, c, cpus, list_ms)) {
      std::fprintf(stderr, "agents not free again after %s\n", job.c_str());
      failed = true;
      break;
    }
  }
  if (placed.empty()) {
    std::printf("%7d %7d %8d %-9s %14s  (%s; peak RSS %.0f MB)\n", n, cpus, n * cpus, s.name,
                "failed", failure.c_str(), peak_rss_mb());
    std::fflush(stdout);
    return;
  }
  double best = *std::min_element(placed.begin(), placed.end());
  double best_plan = *std::min_element(planned.begin(), planned.end());
  std::printf("%7d %7d %8d %-9s %14s %14s %11.1f %12.3f %12.3f %9.2f%% %12.0f%s\n", n,
              cpus, n * cpus, s.name, ms_cell(best).c_str(), ms_cell(median(placed)).c_str(),
              best * 1000 / n, best_plan, median(planned), 100 * best_plan / best,
              peak_rss_mb(), failed ? ("  (then failed: " + failure + ")").c_str() : "");
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  auto config = read_config(argc, argv);
  if (!config)
    return 0;
  auto& o = *config;
  int cpus = o.cpus, reps = o.reps;
  bool updates = o.updates;
  int mem_limit_gb = o.mem_limit_gb;
  if (mem_limit_gb > 0) {
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(mem_limit_gb) << 30;
    ::setrlimit(RLIMIT_AS, &lim);
  }
  caf::actor_system_config cfg;
  hvactor::configure_system(cfg, o.threads);
  caf::actor_system sys{cfg};
  sim_stats stats;

  std::printf("hvactor scheduler simulation: real node_registry + coordinator, simulated "
              "agents (%d CPUs each), %u cores (load %s), %d reps, registry updates %s, "
              "address space capped at %s\n",
              cpus, std::max(1u, std::thread::hardware_concurrency()), load_average().c_str(),
              reps, updates ? "on" : "off",
              mem_limit_gb > 0 ? fmt::format("{} GiB", mem_limit_gb).c_str() : "none");
  std::printf("placement_ms: start -> last colocate received (best of reps, then median); "
              "plan_ms: plan_placement() alone on the same nodes (peer); peak_rss_MB: this "
              "process's peak so far\n\n");
  std::printf("%7s %7s %8s %-9s %14s %14s %11s %12s %12s %10s %12s\n", "nodes", "slots",
              "workers", "strategy", "placement_ms", "(median)", "per_node_us", "plan_ms",
              "(median)", "plan_share", "peak_rss_MB");
  std::vector<std::string> setup_notes;
  for (int n : o.sizes) {
    double join_ms = 0;
    auto c = make_cluster(sys, stats, n, cpus, updates, join_ms);
    double list_ms = 0;
    wait_all_free(sys, c, cpus, list_ms);
    setup_notes.push_back(fmt::format("{:>6} nodes: {} sequential joins {:.0f} ms ({:.1f} us "
                                      "each); one registry list round trip {:.1f} ms",
                                      n, n, join_ms, join_ms * 1000 / n, list_ms));
    for (auto& s : strategies_for(n, cpus))
      run_strategy(sys, c, stats, s, n, o);
    for (auto& agent : c.agents)
      caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(c.registry, caf::exit_reason::user_shutdown);
  }
  std::printf("\nSetup (not part of placement_ms):\n");
  for (auto& line : setup_notes)
    std::printf("  %s\n", line.c_str());
  std::printf("\nTarget: 10,000 nodes x 8 slots placed in < 2000 ms, growing about linearly "
              "(per_node_us flat).\n");
  return 0;
}
