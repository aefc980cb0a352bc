// The driver scale_test.sh runs inside an emulated cluster (hvactor-netcluster
// up -- scale_driver ...): real hvactor-nodes in network namespaces, mutual
// TLS, one rank per node. The cluster's address and TLS identity come from
// the environment (HVACTOR_ADDRESS, HVACTOR_TLS_*), as for any driver.
//
//   scale_driver jobs N K
//       K static jobs in a row, each N nodes x 1 rank: start(), every rank
//       hvd::init()s and allreduces its rank (the sum is checked), shutdown().
//   scale_driver inits N K
//       one job of N ranks; every rank runs K rounds of hvd::init(), a
//       checked allreduce and hvd::shutdown(), counting failed rounds.
//   scale_driver kill N FILE
//       a job of N ranks allreducing in a loop; the last rank writes its
//       monotonic time (ms) to FILE and SIGKILLs itself; run() must fail
//       naming that rank; then a job of N-1 ranks runs on the same cluster.
//
// Output, one line each (flushed at once):
//   JOB k start_ms=.. run_ms=.. shutdown_ms=..   a job that succeeded
//   INITS rank=r rounds=K failures_max_init_ms=F M   inits: per rank
//   DETECTED ms=.. what=<message>                 kill: failure seen ms after the kill
//   ERROR <message>                               anything that failed
// Exit code: 0 when every job did what it should, 1 otherwise, 2 on bad usage.

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

namespace {

using clock_type = std::chrono::steady_clock;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t monotonic_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts); // one clock for every namespace of the machine
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

int64_t ms_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
}

/// Every rank: init, allreduce its rank, shutdown; returns the sum.
double allreduce_ranks() {
  hvd::init();
  std::vector<double> value{static_cast<double>(hvd::rank())};
  hvd::allreduce(std::span<double>(value), hvd::op::sum);
  hvd::shutdown();
  return value[0];
}

/// Every rank allreduces in a loop; rank `victim` writes its monotonic time
/// to `file` after 3 rounds and SIGKILLs itself.
int allreduce_until_killed(int victim, std::string file) {
  hvd::init();
  std::vector<float> grad(1024, 1.0f);
  for (int round = 0; round < 100000; ++round) {
    if (hvd::rank() == victim && round == 3) {
      std::ofstream{file} << monotonic_ms() << "\n";
      ::raise(SIGKILL);
    }
    hvd::allreduce(std::span<float>(grad), hvd::op::average);
  }
  hvd::shutdown();
  return 0;
}

/// Every rank: `count` rounds of init, a checked allreduce, shutdown; returns
/// "failures max_init_ms" (a failed round is counted, and the loop goes on).
std::string init_loop(int count) {
  int failures = 0;
  int64_t slowest = 0;
  for (int i = 0; i < count; ++i) {
    try {
      auto t0 = clock_type::now();
      hvd::init();
      slowest = std::max(slowest, ms_since(t0));
      std::vector<double> value{1.0};
      hvd::allreduce(std::span<double>(value), hvd::op::sum);
      if (value[0] != hvd::size())
        ++failures;
      hvd::shutdown();
    } catch (const std::exception& e) {
      ++failures;
      std::fprintf(stderr, "init round %d: %s\n", i, e.what());
      try {
        hvd::shutdown();
      } catch (...) {
      }
    }
  }
  return std::to_string(failures) + " " + std::to_string(slowest);
}

hvactor::settings job_settings() {
  return hvactor::executor::create_settings(
    {.timeout = std::chrono::seconds(60), .placement_timeout = std::chrono::seconds(60)});
}

hvactor::executor_options one_per_node(int n) {
  return {.num_hosts = n, .num_workers_per_host = 1};
}

/// One static job of `n` ranks; true when every rank saw the right sum.
bool one_job(hvactor::runtime& rt, int n, int k) {
  hvactor::executor ex{rt, job_settings(), one_per_node(n)};
  auto t0 = clock_type::now();
  ex.start();
  auto started = ms_since(t0);
  auto sums = ex.run(&allreduce_ranks);
  auto ran = ms_since(t0) - started;
  ex.shutdown();
  auto stopped = ms_since(t0) - started - ran;
  double want = double(n) * double(n - 1) / 2;
  for (size_t r = 0; r < sums.size(); ++r)
    if (sums[r] != want) {
      say("ERROR job " + std::to_string(k) + ": rank " + std::to_string(r) + " got "
          + std::to_string(sums[r]) + ", not " + std::to_string(want));
      return false;
    }
  if (static_cast<int>(sums.size()) != n) {
    say("ERROR job " + std::to_string(k) + ": " + std::to_string(sums.size()) + " results");
    return false;
  }
  say("JOB " + std::to_string(k) + " start_ms=" + std::to_string(started)
      + " run_ms=" + std::to_string(ran) + " shutdown_ms=" + std::to_string(stopped));
  return true;
}

int jobs(hvactor::runtime& rt, int n, int count) {
  for (int k = 1; k <= count; ++k)
    if (!one_job(rt, n, k))
      return 1;
  return 0;
}

int inits(hvactor::runtime& rt, int n, int count) {
  hvactor::executor ex{rt, job_settings(), one_per_node(n)};
  ex.start();
  auto t0 = clock_type::now();
  auto results = ex.run(&init_loop, count);
  ex.shutdown();
  int rc = 0;
  for (size_t r = 0; r < results.size(); ++r) {
    say("INITS rank=" + std::to_string(r) + " rounds=" + std::to_string(count)
        + " failures_max_init_ms=" + results[r]);
    if (results[r].rfind("0 ", 0) != 0)
      rc = 1;
  }
  say("ELAPSED ms=" + std::to_string(ms_since(t0)));
  return rc;
}

int kill_one(hvactor::runtime& rt, int n, const std::string& file) {
  std::remove(file.c_str());
  {
    hvactor::executor ex{rt, job_settings(), one_per_node(n)};
    ex.start();
    try {
      ex.run(&allreduce_until_killed, n - 1, file);
      say("ERROR the job went on after rank " + std::to_string(n - 1) + " was killed");
      return 1;
    } catch (const std::exception& e) {
      auto seen = monotonic_ms();
      int64_t killed = 0;
      std::ifstream{file} >> killed;
      std::string what = e.what();
      for (auto& c : what)
        if (c == '\n')
          c = ' ';
      say("DETECTED ms=" + std::to_string(killed > 0 ? seen - killed : -1) + " what=" + what);
      if (what.find("rank " + std::to_string(n - 1)) == std::string::npos) {
        say("ERROR the failure does not name rank " + std::to_string(n - 1));
        return 1;
      }
    }
    ex.shutdown();
  }
  return one_job(rt, n - 1, 1) ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  auto& args = rt.args();
  try {
    if (args.size() == 4 && args[1] == "jobs")
      return jobs(rt, std::stoi(args[2]), std::stoi(args[3]));
    if (args.size() == 4 && args[1] == "inits")
      return inits(rt, std::stoi(args[2]), std::stoi(args[3]));
    if (args.size() == 4 && args[1] == "kill")
      return kill_one(rt, std::stoi(args[2]), args[3]);
  } catch (const std::exception& e) {
    std::string what = e.what();
    for (auto& c : what)
      if (c == '\n')
        c = ' ';
    say("ERROR " + what);
    return 1;
  }
  std::fprintf(stderr, "usage: scale_driver jobs N K | inits N K | kill N FILE\n");
  return 2;
}
