#include "allreduce_timeline.hpp"

#include <stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "bench_method.hpp"
#include "allreduce_worker.hpp"
#include "collectives/observe/timeline.hpp" // collectives/, internal: the per-event cost below

using namespace hvactor::bench;

namespace {

/// One row of the tables: a size and the call measured.
struct scenario {
  size_t bytes;
  int32_t async;
  int32_t iters;
  /// Timeline events per call (engine.cpp): the operation alone for a
  /// synchronous allreduce; QUEUE, NEGOTIATE and the operation for an
  /// async one (a batch of one).
  int events;
};

/// Every block's figures of one scenario in the order measured: timeline
/// off [0], on [1], and off again [2], the control that shows how far two
/// identical settings differ on this machine (round i = [0][i], [1][i],
/// [2][i]).
struct samples {
  std::array<std::vector<double>, 3> ops_per_s;
  std::array<std::vector<double>, 3> p50_us;
};

/// Over rounds: the nearest rank, rounded (bench_method.hpp).
double quantile(std::vector<double> v, double q) {
  return quantile_rounded(std::move(v), q);
}

/// Percent by which `on` is worse than `off` (negative: on was better).
double worse(double off, double on, bool higher_is_better) {
  if (off <= 0)
    return 0;
  return 100.0 * (higher_is_better ? off - on : on - off) / off;
}

/// Per round, how much worse setting `b` was than off.
std::vector<double> pair_losses(const std::array<std::vector<double>, 3>& v, size_t b,
                                bool higher_is_better) {
  std::vector<double> out;
  for (size_t i = 0; i < std::min(v[0].size(), v[b].size()); ++i)
    out.push_back(worse(v[0][i], v[b][i], higher_is_better));
  return out;
}

/// "median (q25..q75)".
std::string spread(const std::vector<double>& v) {
  return fmt::format("{:.1f} ({:.1f}..{:.1f})", quantile(v, 0.5), quantile(v, 0.25),
                     quantile(v, 0.75));
}

/// The order of off [0], on [1] and off again [2] in round `round`:
/// rotated, so that none is always first.
int setting(int round, int k) {
  return (round + k) % 3;
}

/// The writer's cost, measured here: nanoseconds per event to record (the
/// caller's share) and to format and write (the writer thread's share).
struct event_cost {
  double record_ns = 0;
  double write_ns = 0;
  double bytes = 0;
};

event_cost measure_event_cost(const std::string& dir) {
  namespace co = hvactor::collectives;
  constexpr int events = 1'000'000;
  co::timeline::options o;
  o.pattern = dir + "/cost.json";
  o.host = "bench";
  o.capacity = events; // no drops: the writer's whole cost shows at close()
  o.flush_interval = std::chrono::hours{1};
  co::timeline tl{o};
  co::timeline_event e;
  co::operation op;
  op.count = 1024;
  e.set_operation(op);
  e.set_backend("gloo");
  auto t0 = co::timeline::now();
  for (int i = 0; i < events; ++i) {
    auto t = co::timeline::now();
    tl.record(e, co::timeline_phase::op, t, t + 40'000);
  }
  auto t1 = co::timeline::now();
  tl.close();
  auto t2 = co::timeline::now();
  event_cost c{static_cast<double>(t1 - t0) / events, static_cast<double>(t2 - t1) / events,
               static_cast<double>(std::filesystem::file_size(tl.path())) / events};
  std::filesystem::remove(tl.path());
  return c;
}

/// What the timeline left in a rank's file: events, whether the array is
/// closed, whether it dropped any.
struct file_check {
  size_t events = 0;
  bool closed = false;
  bool dropped = false;
};

file_check check_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream text;
  text << in.rdbuf();
  auto s = text.str();
  file_check c;
  for (auto at = s.find("\"ph\":\"X\""); at != std::string::npos; at = s.find("\"ph\":\"X\"", at + 1))
    ++c.events;
  c.closed = !s.empty() && s[0] == '[' && s.size() >= 3 && s.compare(s.size() - 3, 3, "\n]\n") == 0;
  c.dropped = s.find("events dropped") != std::string::npos;
  return c;
}

/// Every scenario once on `ex`'s workers (hvd initialized).
void measure_block(hvactor::executor& ex, const std::vector<scenario>& cases,
                   std::vector<samples>& out, int on) {
  for (size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    auto res = ex.execute(&allreduce_worker::hvd_fixed, uint64_t{c.bytes}, c.iters, c.async);
    double slowest = 0;
    for (auto& r : res)
      slowest = std::max(slowest, r.loop_us);
    out[i].ops_per_s[on].push_back(slowest > 0 ? c.iters / (slowest * 1e-6) : 0);
    out[i].p50_us[on].push_back(res.at(0).p50_us);
  }
}

hvactor::settings job_settings(int timeout_s) {
  hvactor::settings s;
  s.timeout = std::chrono::seconds{timeout_s};
  return s;
}

void print_table(const std::vector<scenario>& cases, const std::vector<samples>& results,
                 const event_cost& cost) {
  fmt::print("#{:>7} {:>15} {:>5} | {:>9} {:>9} | {:>20} {:>20} | {:>7} {:>7} {:>6} {:>6} | "
             "{:>6}\n",
             "size", "call", "iters", "ops/s off", "ops/s on", "loss % (q25..q75)",
             "A/A % (q25..q75)", "p50 off", "p50 on", "p50 +%", "A/A %", "cost %");
  for (size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    auto& r = results[i];
    double p50_off = quantile(r.p50_us[0], 0.5);
    double cost_pct = p50_off > 0 ? 100.0 * c.events * (cost.record_ns + cost.write_ns)
                                      / (p50_off * 1000.0)
                                  : 0;
    fmt::print(" {:>7} {:>15} {:>5} | {:>9.0f} {:>9.0f} | {:>20} {:>20} | {:>7.1f} {:>7.1f} "
               "{:>6.2f} {:>6.2f} | {:>6.2f}\n",
               c.bytes, c.async ? "allreduce_async" : "allreduce", c.iters,
               quantile(r.ops_per_s[0], 0.5), quantile(r.ops_per_s[1], 0.5),
               spread(pair_losses(r.ops_per_s, 1, true)), spread(pair_losses(r.ops_per_s, 2, true)),
               p50_off, quantile(r.p50_us[1], 0.5), quantile(pair_losses(r.p50_us, 1, false), 0.5),
               quantile(pair_losses(r.p50_us, 2, false), 0.5), cost_pct);
  }
  std::fflush(stdout);
}

/// /proc/loadavg's first three fields: other work on this machine shows
/// here (and in every figure).
std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen))
    return "n/a";
  return one + " " + five + " " + fifteen;
}

std::string make_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "hvactor-timeline-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("cannot create a temporary directory for the timeline files");
  return tmpl;
}

void run_world(hvactor::runtime& rt, int n, int rounds, int iters, int timeout_s,
               const event_cost& cost, const std::string& dir) {
  std::vector<scenario> cases;
  for (size_t bytes : {size_t{4096}, size_t{1} << 20})
    for (int32_t async : {0, 1})
      cases.push_back({bytes, async, bytes <= 4096 ? iters : std::max(20, iters / 10), async ? 3 : 1});
  auto pattern = [&](const char* kind, int round) {
    return fmt::format("{}/tl-n{}-{}{}.{{rank}}.json", dir, n, kind, round);
  };
  std::vector<std::string> files;

  // 1. As a user runs it: HOROVOD_TIMELINE in the workers' environment, a
  // fresh executor (fresh processes) per round and setting.
  fmt::print("\n# ==== N={} ranks, fresh executors: HOROVOD_TIMELINE unset vs set through "
             "extra_env_vars ({}), {} rounds of off, on, off again ====\n",
             n, pattern("x", 0), rounds);
  std::fflush(stdout);
  std::vector<samples> fresh(cases.size());
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < 3; ++k) {
      int on = setting(round, k);
      hvactor::executor_options o;
      o.num_workers = n;
      if (on == 1)
        o.extra_env_vars["HOROVOD_TIMELINE"] = pattern("x", round);
      hvactor::executor ex{rt, job_settings(timeout_s), o};
      ex.start<allreduce_worker>();
      ex.execute(&allreduce_worker::hvd_init);
      measure_block(ex, cases, fresh, on);
      ex.execute(&allreduce_worker::hvd_finish);
      ex.shutdown();
    }
    for (int r = 0; r < n; ++r)
      files.push_back(hvactor::collectives::timeline_file(pattern("x", round), r));
  }
  print_table(cases, fresh, cost);

  // 2. The same worker processes throughout, hvd::init() with and without
  // the timeline in turn, 4x as many rounds: where the processes landed is
  // then the same for every setting.
  int pairs = 4 * rounds;
  fmt::print("\n# ==== N={} ranks, same workers: hvd::init() with and without HOROVOD_TIMELINE "
             "in turn, {} rounds of off, on, off again ====\n",
             n, pairs);
  std::fflush(stdout);
  std::vector<samples> same(cases.size());
  {
    hvactor::executor_options o;
    o.num_workers = n;
    hvactor::executor ex{rt, job_settings(timeout_s), o};
    ex.start<allreduce_worker>();
    for (int pair = 0; pair < pairs; ++pair) {
      for (int k = 0; k < 3; ++k) {
        int on = setting(pair, k);
        ex.execute(&allreduce_worker::hvd_init_timeline,
                   on == 1 ? pattern("s", pair) : std::string{});
        measure_block(ex, cases, same, on);
        ex.execute(&allreduce_worker::hvd_finish);
      }
      for (int r = 0; r < n; ++r)
        files.push_back(hvactor::collectives::timeline_file(pattern("s", pair), r));
    }
    ex.shutdown();
  }
  print_table(cases, same, cost);

  size_t closed = 0, dropped = 0, fewest = SIZE_MAX, most = 0;
  for (auto& f : files) {
    auto c = check_file(f);
    closed += c.closed ? 1 : 0;
    dropped += c.dropped ? 1 : 0;
    fewest = std::min(fewest, c.events);
    most = std::max(most, c.events);
  }
  fmt::print("# timeline files with the timeline on: {}, {} closed JSON arrays, {} with dropped "
             "events, {}..{} events each\n",
             files.size(), closed, dropped, fewest, most);
}

} // namespace

int run_timeline_overhead(hvactor::runtime& rt, const std::vector<int>& nps, int rounds,
                          int iters, int timeout_s) {
  auto dir = make_dir();
  auto cost = measure_event_cost(dir);
  fmt::print("# hvactor timeline overhead: HOROVOD_TIMELINE off vs on, small float sum "
             "allreduces, {} cores\n",
             std::max(1u, std::thread::hardware_concurrency()));
  fmt::print("# load average at the start: {}\n", load_average());
  fmt::print("# cost per event, measured here (1e6 events): record {:.1f} ns on the calling "
             "thread, format + write {:.1f} ns on the writer thread, {:.0f} B of JSON\n",
             cost.record_ns, cost.write_ns, cost.bytes);
  fmt::print("# ops/s: iterations / slowest rank's loop time, median over rounds; loss %: "
             "(off - on) / off within each round, median (quartiles) over rounds; A/A %: the same "
             "for off vs off again, the noise floor; p50: rank 0's per-call median, median over "
             "rounds; p50 +% and A/A %: per round, median; cost %: events per call x cost per "
             "event / p50 off, the CPU the timeline adds\n");
  int failures = 0;
  for (int n : nps) {
    try {
      run_world(rt, n, std::max(1, rounds), std::max(1, iters), timeout_s, cost, dir);
    } catch (const std::exception& e) {
      ++failures;
      fmt::print(stderr, "!!! timeline overhead at N={} failed: {}\n", n, e.what());
      fmt::print("# !!! timeline overhead at N={} failed: {}\n", n, e.what());
    }
  }
  fmt::print("# load average at the end: {}\n", load_average());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return failures == 0 ? 0 : 1;
}
