// Collectives while the cores are busy (issue 28): the test process runs 1
// or 2 busy threads per core for the whole case, as a training job's compute
// threads do during backward, and real workers run every collective over
// shared memory (one step, chunked, fused), each result exact; a SIGKILLed
// peer still fails the survivors within 2 s. HVACTOR_BIND_TO=core pins each
// worker to a core of its own (none when there are more ranks than cores);
// HOROVOD_THREAD_AFFINITY pins only each worker's engine thread.
// Under a load that forks short processes (a shell loop per core), small
// allreduces stay exact and every rank keeps its cores (the communicator
// moves a rank off a CPU it shares with its peer, or with more ranks than
// cores onto the CPU of the rank it waits for, for a moment only), and 2
// ranks started on one CPU run on two after 2,000 calls.
// The hierarchical path under load is hierarchical_test's. Timing targets live in the
// benchmarks (hvactor-bench --load), not here.

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "busy_threads.hpp"
#include "child_process.hpp"
#include "hvd_session.hpp"
#include "peer_death.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;
using hvactor::test::busy_threads;

namespace {

/// Every collective, exact: sums of rank-dependent integers at sizes of the
/// one-step path, of several chunks, and a fused batch; allgather,
/// broadcast, barrier, alltoall. Returns what differs ("" when nothing).
std::string every_collective() {
  hvactor::test::hvd_session s;
  int rank = hvd::rank(), size = hvd::size();
  std::ostringstream bad;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{300'000}, size_t{2'000'000}}) {
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<int64_t> x(count);
      for (size_t i = 0; i < count; ++i)
        x[i] = static_cast<int64_t>(i % 1000) * (rank + 1) + rep;
      hvd::allreduce(std::span<int64_t>(x), hvd::op::sum);
      for (size_t i = 0; i < count; ++i)
        if (x[i] != static_cast<int64_t>(i % 1000) * size * (size + 1) / 2 + rep * size) {
          bad << " allreduce of " << count << " at " << i << " = " << x[i] << ";";
          break;
        }
    }
  }
  std::vector<std::vector<float>> grads(40, std::vector<float>(3000));
  std::vector<hvd::handle> hs;
  for (size_t g = 0; g < grads.size(); ++g) {
    std::fill(grads[g].begin(), grads[g].end(), static_cast<float>(rank + g));
    hs.push_back(hvd::allreduce_async(std::span<float>(grads[g]), hvd::op::sum,
                                      "g" + std::to_string(g)));
  }
  for (size_t g = 0; g < grads.size(); ++g) {
    hvd::synchronize(hs[g]);
    float want = static_cast<float>(size * (size - 1) / 2 + static_cast<int>(g) * size);
    if (grads[g][0] != want || grads[g].back() != want)
      bad << " fused g" << g << " = " << grads[g][0] << ";";
  }
  std::vector<int32_t> mine(static_cast<size_t>(rank) + 1, rank);
  auto all = hvd::allgather(std::span<const int32_t>(mine));
  if (all.size() != static_cast<size_t>(size * (size + 1) / 2))
    bad << " allgather size " << all.size() << ";";
  for (int root = 0; root < size; ++root) {
    std::vector<double> b(100'000, rank);
    hvd::broadcast(std::span<double>(b), root);
    if (b.front() != root || b.back() != root)
      bad << " broadcast from " << root << ";";
  }
  hvd::barrier();
  std::vector<int64_t> parts(static_cast<size_t>(size) * 3, rank);
  auto got = hvd::alltoall(std::span<const int64_t>(parts));
  for (int r = 0; r < size; ++r)
    if (got.at(static_cast<size_t>(r) * 3) != r)
      bad << " alltoall from " << r << ";";
  return bad.str();
}

/// Allreduces 1 MiB in a loop; rank 1 SIGKILLs itself 500 ms in
/// (peer_death.hpp's reports).
std::string allreduce_until_peer_dies(std::string dir) {
  hvactor::test::hvd_session s;
  if (hvd::rank() == 1)
    std::thread([dir] {
      std::this_thread::sleep_for(500ms);
      hvactor::test::die_now(dir);
    }).detach();
  std::vector<float> x(256 * 1024, 1.0f);
  std::string outcome = "no error";
  auto deadline = std::chrono::steady_clock::now() + 30s;
  try {
    while (std::chrono::steady_clock::now() < deadline)
      hvd::allreduce(std::span<float>(x), hvd::op::sum);
  } catch (const hvactor::error& e) {
    outcome = e.what();
  }
  hvactor::test::report_failure(dir, hvd::rank(), outcome);
  return outcome;
}

/// The cores this worker may run on, comma-joined.
std::string my_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string out;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

/// 20,000 synchronous one-float allreduces, each exact, then the calling
/// thread's cores as before them: a rank that finds its peer on its own CPU
/// moves itself off it for a moment (shm communicator), and must give the
/// thread its own mask back. "" when all is well.
std::string small_calls_keep_affinity() {
  auto before = my_cores();
  {
    hvactor::test::hvd_session s;
    float want = static_cast<float>(hvd::size() * (hvd::size() + 1) / 2);
    for (int i = 0; i < 20000; ++i) {
      float x = static_cast<float>(hvd::rank() + 1);
      hvd::allreduce(std::span<float>(&x, 1), hvd::op::sum);
      if (x != want)
        return "call " + std::to_string(i) + " gave " + std::to_string(x);
    }
  }
  auto after = my_cores();
  return after == before ? "" : "cores " + before + " became " + after;
}

/// The CPU of each of the last 1,000 of 3,000 small allreduces
/// ("<cpu>,<cpu>,..."), after the rank moved onto the first CPU it may use
/// (its affinity that CPU alone for a moment, then as it was): every rank
/// starts on one CPU.
std::string cpus_after_sharing_one() {
  hvactor::test::hvd_session s;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    return "no affinity";
  cpu_set_t first;
  CPU_ZERO(&first);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &first);
      break;
    }
  ::sched_setaffinity(0, sizeof(first), &first);
  ::sched_setaffinity(0, sizeof(allowed), &allowed);
  hvd::barrier();
  // Small calls for 400 ms, every rank the same number: each call's sum
  // says whether some rank's 400 ms are up. Two ranks on one CPU take 2-3
  // us a call on a recent kernel, not milliseconds, so that a fixed count
  // of calls lasted a few milliseconds: one episode on one CPU.
  std::vector<uint8_t> cpus;
  auto begin = std::chrono::steady_clock::now();
  for (bool done = false; !done;) {
    float x = std::chrono::steady_clock::now() - begin >= 400ms ? 1.0f : 0.0f;
    hvd::allreduce(std::span<float>(&x, 1), hvd::op::sum);
    cpus.push_back(static_cast<uint8_t>(::sched_getcpu()));
    done = x > 0;
  }
  // 1,000 calls evenly over the second half, the same calls on every rank.
  std::string out;
  const size_t half = cpus.size() / 2;
  for (size_t i = 0; i < 1000; ++i)
    out += std::to_string(cpus[half + i * (cpus.size() - half) / 1000]) + ",";
  return out;
}

/// A shell loop per core that starts /bin/true over and over (data loaders,
/// scripts): short processes that take a core for a moment, again and again.
struct forking_load {
  std::vector<pid_t> pids;
  forking_load() {
    for (long i = 0; i < std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)); ++i) {
      pid_t p = ::fork();
      if (p == 0) {
        ::execlp("bash", "bash", "-c", "while :; do /bin/true; done", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      if (p > 0)
        pids.push_back(p);
    }
  }
  ~forking_load() {
    for (auto p : pids)
      ::kill(p, SIGKILL);
    for (auto p : pids)
      ::waitpid(p, nullptr, 0);
  }
};

/// "<cores> | <backend_info> | <every_collective's complaints>", with the
/// cores of a thread started after init (they inherit the binding).
std::string bound_collectives() {
  std::string cores, info;
  {
    hvactor::test::hvd_session s;
    std::string later;
    std::thread([&] { later = my_cores(); }).join();
    cores = my_cores() + "/" + later;
    info = hvd::backend_info();
  }
  return cores + " | " + info + " | " + every_collective();
}

/// The cores of the thread named `name` in this process ("" when none).
std::string thread_cores(const std::string& name) {
  for (auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm{e.path() / "comm"};
    std::string got;
    std::getline(comm, got);
    if (got != name)
      continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    std::string out;
    if (::sched_getaffinity(std::stoi(e.path().filename().string()), sizeof(set), &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set))
          out += (out.empty() ? "" : ",") + std::to_string(c);
    return out;
  }
  return "";
}

/// "<local rank> <engine thread's cores> <main thread's cores> | <backend_info> |
/// <every_collective's complaints>".
std::string engine_affinity() {
  hvactor::test::hvd_session s;
  auto head = std::to_string(hvd::local_rank()) + " " + thread_cores("hvd.engine") + " "
            + my_cores() + " | " + hvd::backend_info() + " | ";
  return head + every_collective();
}

/// Every thread's "se.slice" from /proc (the kernel's scheduler slice, in
/// ns; -1 where the kernel does not show it), by thread id.
std::map<int, long> thread_slices() {
  std::map<int, long> out;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in{e.path() / "sched"};
    long slice = -1;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("se.slice", 0) == 0)
        slice = std::stol(line.substr(line.find(':') + 1));
    out[std::stoi(e.path().filename().string())] = slice;
  }
  return out;
}

/// every_collective(), and whether the calling thread has its own
/// scheduler slice again afterwards: waits under load ask for a short one
/// while they sleep, and with more ranks than cores while they yield in an
/// allreduce of more than a slot.
std::string every_collective_keeping_slice() {
  auto slice = [] { return thread_slices()[static_cast<int>(::gettid())]; };
  long before = slice();
  auto bad = every_collective();
  if (long after = slice(); after != before)
    bad += " the thread's slice is " + std::to_string(after) + " ns, not " + std::to_string(before)
           + " as before;";
  return bad;
}

/// Rank 1 joins the allreduce 300 ms late, so rank 0 sleeps on its word;
/// rank 0 watches its threads' slices meanwhile. Returns "<smallest slice
/// seen while waiting> <1 when every thread's slice is as before, else 0>"
/// on rank 0, "" on the others.
std::string slice_while_sleeping() {
  hvactor::test::hvd_session s;
  std::vector<float> x(1000, 1.0f);
  hvd::allreduce(std::span<float>(x), hvd::op::sum); // threads started
  if (hvd::rank() != 0) {
    std::this_thread::sleep_for(300ms);
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    return "";
  }
  auto before = thread_slices();
  std::atomic<bool> done{false};
  long least = LONG_MAX;
  std::thread watch([&] {
    while (!done.load())
      for (auto [tid, slice] : thread_slices())
        if (slice >= 0)
          least = std::min(least, slice);
  });
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  done = true;
  watch.join();
  auto after = thread_slices();
  bool same = true;
  for (auto [tid, slice] : before)
    if (after.count(tid) && after[tid] != slice)
      same = false;
  return std::to_string(least) + " " + (same ? "1" : "0");
}

std::string init_outcome() {
  try {
    hvactor::test::hvd_session s;
    return "initialised";
  } catch (const std::exception& e) {
    return e.what();
  }
}

long online_cores() {
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

} // namespace

TEST_SUITE("collectives under load") {

TEST_CASE("with 1 and 2 busy threads per core, every collective over shared memory completes "
          "exactly at 2 and 3 ranks, and the caller's thread has its own slice again after") {
  for (int per_core : {1, 2}) {
    CAPTURE(per_core);
    busy_threads load{per_core};
    for (int n : {2, 3}) {
      CAPTURE(n);
      hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                           {.num_workers = n, .extra_env_vars = {{"HVACTOR_SHM", "1"}}}};
      ex.start();
      auto t0 = std::chrono::steady_clock::now();
      CHECK(ex.run(&every_collective_keeping_slice)
            == std::vector<std::string>(static_cast<size_t>(n), ""));
      MESSAGE(per_core << " busy per core, " << n << " ranks: "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count()
                       << " ms");
      ex.shutdown();
    }
  }
}

TEST_CASE("under a load that forks short processes, small allreduces stay exact and leave each "
          "rank's cores as they were, at 2 and 3 ranks") {
  forking_load load;
  REQUIRE(!load.pids.empty());
  for (int n : {2, 3}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = n}};
    ex.start();
    CHECK(ex.run(&small_calls_keep_affinity) == std::vector<std::string>(static_cast<size_t>(n), ""));
    ex.shutdown();
  }
}

TEST_CASE("under a load that forks short processes, 2 unbound ranks that start on one CPU run "
          "on different CPUs for most of their small allreduces after the first 200 ms") {
  // On one CPU two ranks take turns at every step (1-3 ms a call while
  // they spin, 60-130 us while one sleeps); the communicator sees the lost
  // core in its waits and keeps a sleeping rank off its peer's CPU.
  if (online_cores() < 2) {
    MESSAGE("skipped: 2 cores needed");
    return;
  }
  forking_load load;
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 60s}),
                       {.num_workers = 2}};
  ex.start();
  auto cpus = ex.run(&cpus_after_sharing_one);
  ex.shutdown();
  REQUIRE(cpus.size() == 2);
  REQUIRE(cpus[0].size() >= 2000);
  std::istringstream a{cpus[0]}, b{cpus[1]};
  int shared = 0, calls = 0;
  for (std::string x, y; std::getline(a, x, ',') && std::getline(b, y, ','); ++calls)
    shared += x == y;
  MESSAGE("on one CPU at " << shared << " of " << calls << " calls");
  CHECK(calls == 1000);
  CHECK(shared < 500);
}

TEST_CASE("HVACTOR_BIND_TO=core pins every thread of each worker to a core of its own (threads "
          "started later too), and with 2 busy threads per core every collective stays exact") {
  if (online_cores() < 2) {
    MESSAGE("skipped: 2 cores needed");
    return;
  }
  busy_threads load{2};
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 2,
                        .extra_env_vars = {{"HVACTOR_SHM", "1"}, {"HVACTOR_BIND_TO", "core"}}}};
  ex.start();
  auto out = ex.run(&bound_collectives);
  ex.shutdown();
  REQUIRE(out.size() == 2);
  std::vector<std::string> cores;
  for (auto& line : out) {
    CAPTURE(line);
    auto cpus = line.substr(0, line.find(' '));
    auto slash = cpus.find('/');
    // One core, the same for the thread started after init.
    CHECK(cpus.find(',') == std::string::npos);
    CHECK(cpus.substr(0, slash) == cpus.substr(slash + 1));
    CHECK(line.find("bound to core " + cpus.substr(0, slash)) != std::string::npos);
    CHECK(line.substr(line.rfind('|')) == "| ");
    cores.push_back(cpus.substr(0, slash));
  }
  CHECK(cores[0] != cores[1]);
}

TEST_CASE("HVACTOR_BIND_TO=core with more local ranks than cores leaves the workers unbound and "
          "working; empty means none; any other value than core or none fails init naming the "
          "variable") {
  auto n = static_cast<int>(online_cores()) + 1;
  {
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = n,
                          .extra_env_vars = {{"HVACTOR_SHM", "1"}, {"HVACTOR_BIND_TO", "core"}}}};
    ex.start();
    auto out = ex.run(&bound_collectives);
    ex.shutdown();
    for (auto& line : out) {
      CAPTURE(line);
      auto why = "; not bound (" + std::to_string(n) + " local ranks on";
      CHECK(line.find(why) != std::string::npos);
      CHECK(line.substr(line.rfind('|')) == "| ");
      CHECK(line.find(',') < line.find(' ')); // more than one core
    }
  }
  for (std::string value : {"sideways", ""}) {
    CAPTURE(value);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = 2, .extra_env_vars = {{"HVACTOR_BIND_TO", value}}}};
    ex.start();
    for (auto& what : ex.run(&init_outcome)) {
      CAPTURE(what);
      if (value.empty()) // empty is the default, none
        CHECK(what == "initialised");
      else
        CHECK(what.find("HVACTOR_BIND_TO='sideways' must be core") != std::string::npos);
    }
    ex.shutdown();
  }
}

TEST_CASE("HOROVOD_THREAD_AFFINITY pins each worker's engine thread to its local rank's core "
          "(the other threads stay free) and every collective stays exact under load; a list "
          "too short leaves the engine threads unpinned and says so (Horovod's); text or a core "
          "out of reach fails init naming the variable") {
  if (online_cores() < 2) {
    MESSAGE("skipped: 2 cores needed");
    return;
  }
  {
    busy_threads load{1};
    hvactor::executor ex{
      test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
      {.num_workers = 2,
       .extra_env_vars = {{"HVACTOR_SHM", "1"}, {"HOROVOD_THREAD_AFFINITY", "1, 0"}}}};
    ex.start();
    auto out = ex.run(&engine_affinity);
    ex.shutdown();
    REQUIRE(out.size() == 2);
    for (auto& line : out) {
      CAPTURE(line);
      int local = line[0] - '0';
      auto want = std::to_string(1 - local); // "1, 0": local rank 0 on core 1
      std::istringstream in{line};
      std::string rank, engine, main_thread;
      in >> rank >> engine >> main_thread;
      CHECK(engine == want);
      CHECK(main_thread.find(',') != std::string::npos); // the process itself stays free
      CHECK(line.find("; engine thread on core " + want) != std::string::npos);
      CHECK(line.substr(line.rfind('|')) == "| ");
    }
  }
  {
    // One id for 2 local ranks (hvactor-run's --thread-affinity 1 before
    // it gave one per local rank): init goes on, unpinned.
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = 2, .extra_env_vars = {{"HOROVOD_THREAD_AFFINITY", "1"}}}};
    ex.start();
    auto out = ex.run(&engine_affinity);
    ex.shutdown();
    REQUIRE(out.size() == 2);
    for (auto& line : out) {
      CAPTURE(line);
      std::istringstream in{line};
      std::string rank, engine;
      in >> rank >> engine;
      CHECK(engine.find(',') != std::string::npos); // every core, as the process
      CHECK(line.find("; engine thread not pinned (HOROVOD_THREAD_AFFINITY='1' names 1 core for 2 "
                      "local ranks) |") != std::string::npos);
      CHECK(line.substr(line.rfind('|')) == "| ");
    }
  }
  for (std::string value : {"0,x", "0,99999", "-1,0"}) {
    CAPTURE(value);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = 2,
                          .extra_env_vars = {{"HOROVOD_THREAD_AFFINITY", value}}}};
    ex.start();
    for (auto& what : ex.run(&init_outcome)) {
      CAPTURE(what);
      CHECK(what.find("HOROVOD_THREAD_AFFINITY='" + value + "'") != std::string::npos);
      CHECK(what.find("a core id per local rank") != std::string::npos);
    }
    ex.shutdown();
  }
}

TEST_CASE("a rank sleeping on a late peer asks for a 100 us scheduler slice meanwhile (Linux "
          "6.12+) and every thread has its own slice again afterwards") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 2, .extra_env_vars = {{"HVACTOR_SHM", "1"}}}};
  ex.start();
  auto out = ex.run(&slice_while_sleeping);
  ex.shutdown();
  REQUIRE(out.size() == 2);
  CAPTURE(out[0]);
  std::istringstream in{out[0]};
  long least = 0;
  int same = 0;
  in >> least >> same;
  CHECK(same == 1);
  struct utsname u;
  ::uname(&u);
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  if (std::pair{major, minor} >= std::pair{6, 12})
    CHECK(least == 100'000);
  else
    MESSAGE("kernel " << u.release << ": no custom slices before 6.12");
}

TEST_CASE("with 2 busy threads per core, a SIGKILLed peer fails the survivors within 2 s") {
  busy_threads load{2};
  hvactor::test::temp_dir dir;
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", "1"}}}};
  ex.start();
  CHECK_THROWS_AS(ex.run(&allreduce_until_peer_dies, dir.path().string()), hvactor::worker_error);
  hvactor::test::check_survivors_failed(dir.path(), {0, 2}, 2s);
  ex.shutdown();
}

} // TEST_SUITE
