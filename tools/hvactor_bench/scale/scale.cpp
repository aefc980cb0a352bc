// hvactor-bench scale: job start on many nodes, phase by phase (scale.hpp),
// with Open MPI's job start on the same nodes interleaved by round.

#include "tools/hvactor_bench/scale/scale.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "base/internal/start_marks.hpp"
#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/report.hpp"
#include "tools/hvactor_bench/scale/scale_usage.hpp"

namespace hvactor::bench_tool {

namespace {

namespace marks = hvactor::detail::start_marks;
namespace hvd = hvactor::hvd;

/// When this process's main() was about to run (static initialization of
/// the program, after the dynamic loader): a worker's "process started".
const int64_t process_start_ns = marks::now_ns();

/// Run on every rank: hvd::init(), timed, with the rank's start marks.
std::vector<int64_t> init_probe() {
  int64_t begin = marks::now_ns();
  hvd::init();
  int64_t done = marks::now_ns();
  return {process_start_ns,
          marks::registered_ns.load(),
          marks::env_set_ns.load(),
          begin,
          done,
          static_cast<int64_t>(rss_bytes(::getpid()))};
}

double ms_between(int64_t from_ns, int64_t to_ns) {
  return static_cast<double>(to_ns - from_ns) / 1e6;
}

double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

std::string first_line(const std::string& text) {
  auto line = text.substr(0, text.find('\n'));
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

/// The driver's once-per-job phases, from its coordinator's marks.
void driver_phases(scale_round& r, int64_t t0) {
  auto placed = marks::placed_ns.load(), spawned = marks::spawned_ns.load();
  if (placed >= t0)
    r.placement_ms = ms_between(t0, placed);
  if (placed >= t0 && spawned >= placed)
    r.shipping_ms = ms_between(placed, spawned);
}

/// Every rank's phases from init_probe's answers.
void rank_phases(scale_round& r, const std::vector<std::vector<int64_t>>& probes, int64_t t0) {
  int64_t spawned = marks::spawned_ns.load(), last = t0;
  for (auto& p : probes) {
    if (p.size() < 6)
      throw std::runtime_error("a rank answered the probe with too few values");
    auto [main, registered, env, begin, done, rss] = std::tuple{p[0], p[1], p[2], p[3], p[4], p[5]};
    r.process_ms.push_back(ms_between(spawned, main));
    r.registration_ms.push_back(ms_between(main, registered));
    // The environment can overtake the registration's answer (two actors).
    r.wait_ms.push_back(std::max(0.0, ms_between(registered, env)));
    r.dispatch_ms.push_back(ms_between(env, begin));
    r.rendezvous_ms.push_back(ms_between(begin, done));
    r.worker_mib.push_back(mib(static_cast<uint64_t>(rss)));
    last = std::max(last, done);
  }
  r.total_ms = ms_between(t0, last);
}

/// The head's, the nodes' and the driver's memory now.
void cluster_memory(scale_round& r) {
  auto procs = find_cluster_processes();
  r.driver_mib = mib(rss_bytes(procs.driver));
  r.head_mib = procs.head > 0 ? mib(rss_bytes(procs.head)) : 0;
  for (auto& [id, pid] : procs.nodes)
    r.node_mib.push_back(mib(rss_bytes(pid)));
}

/// One job: start(), hvd::init() on every rank, `while_up` (idle CPU on
/// the last round), shutdown(). A failed start is a result, not a throw.
scale_round measure_round(hvactor::runtime& rt, const layout& l, const hvactor::settings& s,
                          int round, const std::function<void()>& while_up) {
  scale_round r;
  r.round = round;
  r.ranks = l.np;
  marks::placed_ns = 0;
  marks::spawned_ns = 0;
  marks::all_registered_ns = 0;
  hvactor::executor_options o;
  l.apply(o);
  int64_t t0 = 0;
  try {
    hvactor::executor ex{rt, s, o};
    t0 = marks::now_ns();
    ex.start();
    r.start_ms = ms_between(t0, marks::now_ns());
    r.shipped_mib = mib(ex.shipped_bytes());
    auto probes = ex.run(&init_probe);
    driver_phases(r, t0);
    rank_phases(r, probes, t0);
    cluster_memory(r);
    r.ok = true;
    if (while_up)
      while_up();
    ex.shutdown();
  } catch (const std::exception& e) {
    if (t0 > 0)
      driver_phases(r, t0);
    if (!r.ok) {
      r.error = first_line(e.what());
      r.total_ms = t0 > 0 ? ms_between(t0, marks::now_ns()) : 0;
    }
  }
  return r;
}

// Every option of hvactor-bench scale.
void declare_options(cxxopts::Options& p) {
  add_layout_options(p);
  // clang-format off
  p.add_options()
    ("rounds", "job starts (each a new job; with --peer, interleaved with the peer's)",
     cxxopts::value<int>()->default_value("3"))
    ("idle-seconds", "after the last round's hvd::init(): seconds over which the cluster's idle "
                     "CPU use is measured (0: not measured)",
     cxxopts::value<double>()->default_value("10"))
    ("timeout", "the job's settings.timeout in seconds (registration, rendezvous); default: "
                "the executor's", cxxopts::value<double>())
    ("peer", "mpi: Open MPI's job start (mpirun to every rank's MPI_Init) on the same nodes",
     cxxopts::value<std::string>())
    ("peer-limit", "seconds one mpirun may take", cxxopts::value<double>()->default_value("300"))
    ("pause", "seconds between jobs", cxxopts::value<double>()->default_value("1"))
    ("json", "write every rank's phases, memory and idle CPU here", cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
}

struct scale_args {
  layout where;
  int rounds = 3;
  double idle_s = 10, pause_s = 1, peer_limit_s = 300;
  bool mpi = false;
  hvactor::settings settings = hvactor::executor::create_settings({});
  std::string json;
};

scale_args parse_scale_args(const cxxopts::ParseResult& o) {
  scale_args a;
  a.where = parse_layout(o);
  a.rounds = o["rounds"].as<int>();
  a.idle_s = o["idle-seconds"].as<double>();
  a.pause_s = o["pause"].as<double>();
  a.peer_limit_s = o["peer-limit"].as<double>();
  if (a.rounds < 1 || a.rounds > 1000)
    throw std::invalid_argument(fmt::format("--rounds must be in 1..1000 (got {})", a.rounds));
  if (!(a.idle_s >= 0 && a.idle_s <= 3600) || !(a.pause_s >= 0 && a.pause_s <= 600)
      || !(a.peer_limit_s > 0 && a.peer_limit_s <= 3600))
    throw std::invalid_argument("--idle-seconds must be in [0, 3600], --pause in [0, 600] and "
                                "--peer-limit in (0, 3600]");
  if (o.count("timeout")) {
    auto t = o["timeout"].as<double>();
    if (!(t > 0 && t <= 86400))
      throw std::invalid_argument("--timeout must be in (0, 86400] seconds");
    a.settings.timeout = std::chrono::milliseconds{static_cast<int64_t>(t * 1000)};
  }
  if (o.count("peer")) {
    if (o["peer"].as<std::string>() != "mpi")
      throw std::invalid_argument("--peer " + o["peer"].as<std::string>()
                                  + ": scale's peer is mpi (Open MPI's job start)");
    if (auto why = mpi_start_missing(); !why.empty())
      throw std::invalid_argument("--peer mpi: " + why);
    a.mpi = true;
  }
  if (o.count("json")) {
    a.json = o["json"].as<std::string>();
    check_writable(a.json, "--json");
  }
  return a;
}

std::string settings_json(const scale_args& a) {
  return fmt::format("{{\"ranks\": {}, \"num_hosts\": {}, \"per_host\": {}, \"rounds\": {}, "
                     "\"idle_seconds\": {:g}, \"timeout_ms\": {}, \"peers\": [{}]}}",
                     a.where.np, a.where.num_hosts, a.where.per_host, a.rounds, a.idle_s,
                     a.settings.timeout.count(), a.mpi ? "\"mpi\"" : "");
}

void pause_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

} // namespace

int run_scale(hvactor::runtime& rt, const std::vector<std::string>& args) {
  cxxopts::Options p{"hvactor-bench scale",
                     "start() to every rank's hvd::init(), phase by phase; memory; idle CPU"};
  declare_options(p);
  auto o = parse_words(p, args, 2);
  if (o.count("help")) {
    std::cout << p.help() << "\n";
    return 0;
  }
  auto a = parse_scale_args(o);
  fmt::print("# hvactor-bench scale: {} ranks{}, {} round(s), settings.timeout {} ms\n",
             a.where.np,
             a.where.num_hosts > 0
               ? fmt::format(" ({} hosts x {})", a.where.num_hosts, a.where.per_host)
               : std::string{},
             a.rounds, a.settings.timeout.count());
  print_round_header();
  std::vector<scale_round> rounds;
  std::vector<mpi_round> mpi;
  scale_idle idle;
  bool idle_measured = false;
  for (int k = 1; k <= a.rounds; ++k) {
    std::function<void()> while_up;
    if (k == a.rounds && a.idle_s > 0)
      while_up = [&] {
        auto u = measure_idle_cpu(find_cluster_processes(), a.idle_s);
        idle = {u.seconds, u.head, u.nodes, u.driver, u.workers, u.total(),
                u.busiest, u.busiest_percent, u.threads};
        idle_measured = true;
      };
    rounds.push_back(measure_round(rt, a.where, a.settings, k, while_up));
    print_round(rounds.back());
    pause_for(a.pause_s);
    if (a.mpi) {
      int hosts = a.where.num_hosts > 0 ? a.where.num_hosts : a.where.np;
      int per = a.where.num_hosts > 0 ? a.where.per_host : 1;
      mpi.push_back(run_mpi_start(hosts, per, a.peer_limit_s));
      mpi.back().round = k;
      print_mpi_round(mpi.back());
      pause_for(a.pause_s);
    }
  }
  print_summary(rounds, mpi, idle_measured ? &idle : nullptr);
  if (!a.json.empty())
    write_scale_json(a.json, settings_json(a), rounds, mpi, idle_measured ? &idle : nullptr);
  auto failed = std::count_if(rounds.begin(), rounds.end(), [](auto& r) { return !r.ok; });
  if (failed > 0)
    fmt::print(stderr, "hvactor-bench scale: {} of {} job start(s) failed\n", failed,
               rounds.size());
  return failed > 0 ? 1 : 0;
}

} // namespace hvactor::bench_tool
