// elastic_recovery: how fast an elastic job recovers and grows, and what
// elasticity costs per step, on a local cluster of real hvactor-node
// processes (head + 4 nodes, 1 CPU each: 5 one-slot hosts).
//
// Per round, a 4-worker elastic job (discovery period 100 ms by default)
// trains steps of --step-ms with one allreduce and a commit each:
//  1. SIGKILL of one worker (not rank 0): time from the kill to the
//     survivors' next successful commit, split into detection (the
//     survivors hold the new generation's assignment), re-rendezvous (their
//     collectives connected) and state sync (rank 0's state broadcast);
//  2. then the spare host appears in discovery: time until the grown world
//     committed, split into the new worker's start and the world forming.
// Peer, same run: recovery by restarting the job (a static 3-worker
// executor start() + its first allreduce), what a non-elastic job (Ray
// Train's FailureConfig) does after a failure. Horovod's elastic driver is
// not packaged for Debian; its floor is its 1 s discovery period.
// Then the steady-state cost of commit() and check_host_updates() per step
// of a 4-worker job, against --step-ms.
//
// The program is its own driver: the parent starts the cluster and runs
// itself as a child with --address (worker processes re-run this binary).
//
//   elastic_recovery [--rounds 5] [--period-ms 100] [--step-ms 10] [--steps 300]

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "local_cluster.hpp"
#include "bench_method.hpp"

namespace {

namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

int64_t ns(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

struct step_options {
  int32_t steps = 300;
  int32_t step_ms = 10;
  int32_t state_bytes = 0;
  /// Recovery rounds: the driver creates this file to end the job.
  std::string stop_file;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_options& x) {
  return f(caf::meta::type_name("step_options"), x.steps, x.step_ms, x.state_bytes, x.stop_file);
}

// Whether rank 0 saw the stop file (every rank learns it at the same step).
bool stop_requested(const std::string& path) {
  int32_t stop = hvd::rank() == 0 && std::filesystem::exists(path) ? 1 : 0;
  hvd::allreduce(std::span<int32_t>(&stop, 1), hvd::op::max);
  return stop != 0;
}

// One training step: an allreduce and `step_ms` of "compute".
void step(int step_ms) {
  std::vector<float> grad(1024, 1.0f);
  hvd::allreduce(std::span<float>(grad), hvd::op::sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
}

// Recovery rounds' worker: rank 0 reports every commit with its time; the
// first commit after a reset reports the reset's phases.
bool recovery_train(step_options o) {
  hvactor::log::event({{"kind", "started"},
                       {"pid", std::to_string(::getpid())},
                       {"host", std::getenv("HOROVOD_HOSTNAME")},
                       {"t", std::to_string(ns(clock_type::now()))}});
  hvd::init();
  hvd::elastic::object_state<int64_t> st{0};
  int reported = -1;
  hvd::elastic::run(st, [&](auto& s) {
    while (s.template value<0>() < o.steps && !stop_requested(o.stop_file)) {
      step(o.step_ms);
      ++s.template value<0>();
      s.commit();
      auto now = clock_type::now();
      if (hvd::elastic::generation() != reported) {
        reported = hvd::elastic::generation();
        auto r = hvd::elastic::last_reset();
        hvactor::log::event({{"kind", "joined"},
                             {"rank", std::to_string(hvd::rank())},
                             {"size", std::to_string(hvd::size())},
                             {"host", std::getenv("HOROVOD_HOSTNAME")},
                             {"assigned", std::to_string(ns(r.assigned))},
                             {"connected", std::to_string(ns(r.connected))},
                             {"synced", std::to_string(ns(r.synced))},
                             {"t", std::to_string(ns(now))}});
      }
      if (hvd::rank() == 0)
        hvactor::log::event({{"kind", "commit"},
                             {"size", std::to_string(hvd::size())},
                             {"t", std::to_string(ns(now))}});
    }
  });
  return true;
}

// Steady-state worker: mean microseconds of commit() and of
// check_host_updates() per step, and of the step itself.
std::vector<double> steady_train(step_options o) {
  hvd::init();
  hvd::elastic::object_state<int64_t, std::vector<char>> st{0, std::vector<char>(
                                                                 static_cast<size_t>(o.state_bytes))};
  double commit_us = 0, check_us = 0, step_us = 0;
  hvd::elastic::run(st, [&](auto& s) {
    for (int i = 0; i < o.steps; ++i) {
      auto t0 = clock_type::now();
      step(o.step_ms);
      auto t1 = clock_type::now();
      s.commit();
      auto t2 = clock_type::now();
      s.check_host_updates();
      auto t3 = clock_type::now();
      step_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
      commit_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
      check_us += std::chrono::duration<double, std::micro>(t3 - t2).count();
    }
  });
  return {commit_us / o.steps, check_us / o.steps, step_us / o.steps};
}

// Events of a job, waited on by the driver's thread.
struct event_log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::map<std::string, std::string>> events;

  void add(const std::map<std::string, std::string>& e) {
    std::lock_guard<std::mutex> lk{mu};
    events.push_back(e);
    cv.notify_all();
  }

  // The first event from index `from` on that satisfies `pred`.
  template <class Pred>
  std::optional<std::map<std::string, std::string>> wait(size_t from, Pred pred,
                                                         std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lk{mu};
    std::optional<std::map<std::string, std::string>> found;
    cv.wait_for(lk, limit, [&] {
      for (size_t i = from; i < events.size(); ++i)
        if (pred(events[i])) {
          found = events[i];
          return true;
        }
      return false;
    });
    return found;
  }

  size_t size() {
    std::lock_guard<std::mutex> lk{mu};
    return events.size();
  }
};

double ms_between(int64_t a, int64_t b) {
  return static_cast<double>(b - a) / 1e6;
}

struct round_result {
  double detect = 0, rendezvous = 0, sync = 0, recovery = 0;
  double join_start = 0, join_form = 0, join = 0;
};

// The upper median over rounds (bench_method.hpp).
double median(std::vector<double> xs) {
  return hvactor::bench::upper_median(std::move(xs));
}

using event = std::map<std::string, std::string>;

std::string field(const event& e, const char* k) {
  auto i = e.find(k);
  return i == e.end() ? std::string{} : i->second;
}

// A commit in a world of `size` workers.
auto commit_of(const char* size) {
  return [=](const event& e) { return field(e, "kind") == "commit" && field(e, "size") == size; };
}

// After 20 commits of 4 workers, SIGKILLs node3's worker and times the
// recovery to 3 (detection, re-rendezvous, state sync). False when a wait
// ran out.
bool measure_kill(event_log& log, round_result& r) {
  // Warm: 20 commits in the 4-worker world.
  for (int i = 0; i < 20; ++i)
    if (!log.wait(0, commit_of("4"), 60s))
      return false;
  auto victim = log.wait(
    0, [&](auto& e) { return field(e, "kind") == "started" && field(e, "host") == "node3"; },
    10s);
  if (!victim)
    return false;
  auto from = log.size();
  auto t_kill = ns(clock_type::now());
  ::kill(std::stoi(field(*victim, "pid")), SIGKILL);
  auto next = log.wait(from, commit_of("3"), 60s);
  auto joined = log.wait(
    from,
    [&](auto& e) {
      return field(e, "kind") == "joined" && field(e, "rank") == "0" && field(e, "size") == "3";
    },
    60s);
  if (!next || !joined)
    return false;
  r.recovery = ms_between(t_kill, std::stoll(field(*next, "t")));
  r.detect = ms_between(t_kill, std::stoll(field(*joined, "assigned")));
  r.rendezvous = ms_between(std::stoll(field(*joined, "assigned")),
                            std::stoll(field(*joined, "connected")));
  r.sync = ms_between(std::stoll(field(*joined, "connected")), std::stoll(field(*joined, "synced")));
  return true;
}

// After 10 commits of 3, node4 appears: times its start, the new world's
// forming and its first commit of 4. False when a wait ran out.
bool measure_join(event_log& log, std::vector<hvactor::host_slots>& hosts, std::mutex& hosts_mu,
                  round_result& r) {
  // Let the smaller world settle, then a host appears.
  for (int i = 0; i < 10; ++i)
    log.wait(log.size(), commit_of("3"), 30s);
  auto from = log.size();
  auto t_add = ns(clock_type::now());
  {
    std::lock_guard<std::mutex> lk{hosts_mu};
    hosts.push_back({"node4", 1});
  }
  auto started = log.wait(
    from, [&](auto& e) { return field(e, "kind") == "started" && field(e, "host") == "node4"; },
    60s);
  auto grown = log.wait(from, commit_of("4"), 60s);
  auto formed = log.wait(
    from,
    [&](auto& e) {
      return field(e, "kind") == "joined" && field(e, "host") == "node4";
    },
    60s);
  if (!started || !grown || !formed)
    return false;
  r.join = ms_between(t_add, std::stoll(field(*grown, "t")));
  r.join_start = ms_between(t_add, std::stoll(field(*started, "t")));
  r.join_form = ms_between(std::stoll(field(*started, "t")), std::stoll(field(*formed, "connected")));
  return true;
}

std::optional<round_result> recovery_round(hvactor::runtime& rt, int period_ms, int step_ms) {
  auto hosts = std::make_shared<std::vector<hvactor::host_slots>>(
    std::vector<hvactor::host_slots>{{"head", 1}, {"node1", 1}, {"node2", 1}, {"node3", 1}});
  auto hosts_mu = std::make_shared<std::mutex>();
  hvactor::executor_options opts{.min_workers = 2, .max_workers = 4};
  opts.discovery_period = std::chrono::milliseconds(period_ms);
  opts.discovery = hvactor::discovery::function([=] {
    std::lock_guard<std::mutex> lk{*hosts_mu};
    return *hosts;
  });
  auto s = hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
  hvactor::executor ex{rt, s, opts};
  auto log = std::make_shared<event_log>();
  ex.on_event([log](int, const std::map<std::string, std::string>& e) { log->add(e); });
  ex.start();
  auto stop_file = fmt::format("/tmp/hvactor-elastic-recovery-{}-stop", ::getpid());
  std::filesystem::remove(stop_file);
  step_options o{.steps = 100000, .step_ms = step_ms, .stop_file = stop_file};
  std::optional<round_result> out;
  std::thread driver{[&] {
    round_result r;
    if (measure_kill(*log, r) && measure_join(*log, *hosts, *hosts_mu, r))
      out = r;
  }};
  // The job ends once the driver thread created the stop file.
  std::thread stopper{[&] {
    driver.join();
    std::FILE* f = std::fopen(stop_file.c_str(), "w");
    if (f)
      std::fclose(f);
  }};
  try {
    ex.run(&recovery_train, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_recovery: the job failed: %s\n", e.what());
    out.reset();
  }
  stopper.join();
  std::filesystem::remove(stop_file);
  ex.shutdown();
  return out;
}

// Peer: a failed static job restarted from its checkpoint: start() of 3
// workers and their first allreduce.
double restart_peer(hvactor::runtime& rt) {
  auto t0 = clock_type::now();
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 3}};
  ex.start();
  ex.run(+[] {
    hvd::init();
    step(0);
    return 0;
  });
  auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  ex.shutdown();
  return ms;
}

int run_child(hvactor::runtime& rt, int rounds, int period_ms, int step_ms, int steps) {
  std::vector<double> detect, rdv, sync, total, join_start, join_form, join, peer;
  for (int i = 0; i < rounds; ++i) {
    auto r = recovery_round(rt, period_ms, step_ms);
    if (!r) {
      std::fprintf(stderr, "elastic_recovery: round %d did not complete\n", i);
      continue;
    }
    detect.push_back(r->detect);
    rdv.push_back(r->rendezvous);
    sync.push_back(r->sync);
    total.push_back(r->recovery);
    join_start.push_back(r->join_start);
    join_form.push_back(r->join_form);
    join.push_back(r->join);
    peer.push_back(restart_peer(rt));
  }
  std::printf("\n4 one-slot hosts (+1 spare), discovery every %d ms, steps of %d ms; %zu rounds, "
              "medians, ms\n\n",
              period_ms, step_ms, total.size());
  std::printf("| %-62s | %9s |\n", "phase", "median ms");
  std::printf("|%s|%s|\n", std::string(64, '-').c_str(), std::string(11, '-').c_str());
  auto row = [](const char* what, const std::vector<double>& xs) {
    std::printf("| %-62s | %9.1f |\n", what, median(xs));
  };
  row("worker SIGKILL -> survivors hold the new assignment (detect)", detect);
  row("assignment -> collectives connected (re-rendezvous)", rdv);
  row("connected -> state synced from rank 0 (sync)", sync);
  row("worker SIGKILL -> survivors' next commit (recovery)", total);
  row("peer: restart as a static job (start 3 workers + allreduce)", peer);
  row("host appears -> its worker process runs", join_start);
  row("new worker runs -> new world connected", join_form);
  row("host appears -> grown world's first commit (join)", join);
  if (!total.empty())
    std::printf("\nrecovery / restart peer: %.2fx\n", median(total) / median(peer));

  // Steady state: commit() and check_host_updates() per step.
  std::printf("\nsteady state, 4 workers, %d steps of %d ms + one 4 KiB allreduce:\n\n", steps,
              step_ms);
  std::printf("| %-22s | %10s | %10s | %10s | %12s |\n", "state", "commit us", "check us",
              "step us", "share of step");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(), std::string(12, '-').c_str(),
              std::string(12, '-').c_str(), std::string(12, '-').c_str(),
              std::string(14, '-').c_str());
  for (int bytes : {0, 1 << 20}) {
    hvactor::executor_options opts{.min_workers = 4, .max_workers = 4};
    opts.discovery = hvactor::discovery::function([] {
      return std::vector<hvactor::host_slots>{{"head", 1}, {"node1", 1}, {"node2", 1},
                                              {"node3", 1}};
    });
    hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = 20s}), opts};
    ex.start();
    auto res = ex.run(&steady_train, step_options{.steps = steps, .step_ms = step_ms,
                                                  .state_bytes = bytes});
    ex.shutdown();
    double commit = 0, check = 0, st = 0;
    for (auto& r : res) {
      commit += r[0] / res.size();
      check += r[1] / res.size();
      st += r[2] / res.size();
    }
    std::printf("| %-22s | %10.1f | %10.1f | %10.1f | %11.2f%% |\n",
                bytes == 0 ? "epoch counter" : "epoch + 1 MiB", commit, check, st,
                100.0 * (commit + check) / st);
  }
  return total.empty() ? 1 : 0;
}

int run_parent(const std::string& node_binary, const std::vector<std::string>& child_args) {
  auto dir = hvactor::bench::make_temp_dir("hvactor-elastic-recovery");
  int rc = 1;
  try {
    hvactor::bench::local_cluster cluster{{node_binary, 5, 1, dir + "/cluster"}};
    std::string self = std::filesystem::read_symlink("/proc/self/exe");
    std::vector<std::string> argv{self, "--address", cluster.address(), "--child"};
    argv.insert(argv.end(), child_args.begin(), child_args.end());
    auto pid = hvactor::bench::spawn_process(argv);
    rc = hvactor::bench::wait_process(pid, std::chrono::minutes(20));
    if (rc == -1)
      rc = hvactor::bench::stop_process(pid);
    cluster.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_recovery: %s\n", e.what());
  }
  // HVACTOR_BENCH_KEEP=1 keeps the nodes' logs and work dirs (the path is
  // printed) for a run worth reading.
  if (const char* keep = std::getenv("HVACTOR_BENCH_KEEP"); keep && std::string{keep} == "1")
    std::fprintf(stderr, "elastic_recovery: kept %s\n", dir.c_str());
  else
    hvactor::bench::remove_dir(dir);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv};
  cxxopts::Options parser{"elastic_recovery",
                          "Elastic recovery, join and commit cost on a local 5-node cluster"};
  // clang-format off
  parser.add_options()
    ("rounds", "kill/join rounds", cxxopts::value<int>()->default_value("5"))
    ("period-ms", "discovery period", cxxopts::value<int>()->default_value("100"))
    ("step-ms", "compute per training step", cxxopts::value<int>()->default_value("10"))
    ("steps", "steps of the steady-state job", cxxopts::value<int>()->default_value("300"))
    ("hvactor-node", "path of hvactor-node", cxxopts::value<std::string>()->default_value(HVACTOR_NODE_BIN))
    ("child", "internal: run the measurements")
    ("h,help", "print this help");
  // clang-format on
  std::vector<char*> rest;
  for (auto& a : rt.args())
    rest.push_back(const_cast<char*>(a.c_str()));
  try {
    auto opts = parser.parse(static_cast<int>(rest.size()), rest.data());
    if (opts.count("help")) {
      std::printf("%s\n", parser.help().c_str());
      return 0;
    }
    int rounds = std::max(1, opts["rounds"].as<int>());
    int period = std::max(1, opts["period-ms"].as<int>());
    int step_ms = std::max(0, opts["step-ms"].as<int>());
    int steps = std::max(1, opts["steps"].as<int>());
    if (opts.count("child"))
      return run_child(rt, rounds, period, step_ms, steps);
    return run_parent(opts["hvactor-node"].as<std::string>(),
                      {"--rounds", std::to_string(rounds), "--period-ms", std::to_string(period),
                       "--step-ms", std::to_string(step_ms), "--steps", std::to_string(steps)});
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "elastic_recovery: %s (see --help)\n", e.what());
    return 2;
  }
}
