// Negotiation by name between real worker processes (2, 3 and 4 ranks, over
// shared memory and over Gloo): ranks that submit the same named async
// allreduces in different orders, with synchronous collectives in between,
// get exact results; the same name with two shapes fails every rank.

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "child_process.hpp"
#include "hvd_session.hpp"
#include "peer_death.hpp"
#include "permuted_collectives.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

using hvactor::test::permuted;

/// Rank 0 submits grad.a then grad.b, the others the reverse (the issue's
/// example); returns the sums.
std::vector<double> reversed_pair() {
  hvactor::test::hvd_session s;
  std::vector<double> a(4, 1.0 + hvd::rank()), b(4, 100.0 * (1 + hvd::rank()));
  hvd::handle ha, hb;
  if (hvd::rank() == 0) {
    ha = hvd::allreduce_async(std::span<double>(a), hvd::op::sum, "grad.a");
    hb = hvd::allreduce_async(std::span<double>(b), hvd::op::sum, "grad.b");
  } else {
    hb = hvd::allreduce_async(std::span<double>(b), hvd::op::sum, "grad.b");
    ha = hvd::allreduce_async(std::span<double>(a), hvd::op::sum, "grad.a");
  }
  hvd::synchronize(hb);
  hvd::synchronize(ha);
  return {a[0], b[0]};
}

/// Every rank submits "w" with 10 + rank elements.
std::string same_name_other_size() {
  hvactor::test::hvd_session s;
  std::vector<float> x(10 + static_cast<size_t>(hvd::rank()), 1.0f);
  auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "w");
  try {
    hvd::synchronize(h);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return "no error";
}

/// Rank `pausing` sleeps `ms` before its allreduce of "late"; returns the
/// sum, or the error's text.
std::string pause_then_allreduce(int pausing, int ms) {
  hvactor::test::hvd_session s;
  if (hvd::rank() == pausing)
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  std::vector<float> x(8, 1.0f);
  auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "late");
  try {
    hvd::synchronize(h);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return std::to_string(x[0]);
}

/// Rank 0 submits "grad/a", the others "grad/b": never paired.
std::string different_names() {
  hvactor::test::hvd_session s;
  std::vector<float> x(4, 1.0f);
  auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum,
                                hvd::rank() == 0 ? "grad/a" : "grad/b");
  try {
    hvd::synchronize(h);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return "no error";
}

/// Rank 1 SIGKILLs itself 500 ms in without submitting "never"; the
/// others wait for "never", which a live peer could still submit
/// (peer_death.hpp's reports).
std::string wait_for_dead_peer(std::string dir) {
  hvactor::test::hvd_session s;
  if (hvd::rank() == 1) {
    std::this_thread::sleep_for(500ms);
    hvactor::test::die_now(dir);
  }
  std::vector<float> x(8, 1.0f);
  std::string outcome = "no error";
  try {
    auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "never");
    hvd::synchronize(h);
  } catch (const hvactor::error& e) {
    outcome = e.what();
  }
  hvactor::test::report_failure(dir, hvd::rank(), outcome);
  return outcome;
}

/// Rank 1 stops itself (SIGSTOP, a forked child sends SIGCONT after
/// `ms`) before its allreduce, so that rank 0's one round waits that long
/// on its own thread; returns the CPU seconds rank 0's process used
/// meanwhile, or -1 on the other ranks.
double cpu_during_long_round(int ms) {
  hvactor::test::hvd_session s;
  std::vector<float> x(8, 1.0f);
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  if (hvd::rank() == 1) {
    pid_t self = ::getpid();
    if (::fork() == 0) {
      ::usleep(static_cast<useconds_t>(ms) * 1000);
      ::kill(self, SIGCONT);
      ::_exit(0);
    }
    ::raise(SIGSTOP);
  }
  auto cpu = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec)
           + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  double before = cpu();
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  double used = cpu() - before;
  if (x[0] != 4.0f) // two sums of 1 + 1
    throw std::runtime_error("wrong sum " + std::to_string(x[0]));
  return hvd::rank() == 0 ? used : -1;
}

/// After an allreduce, rank r idles `idle_ms` + 300 r ms (long enough for
/// the idle heartbeat to reach its 8 s), then allreduces again; returns how
/// long that call took on this rank (ms), or -1 for a wrong sum.
double idle_then_allreduce(int idle_ms) {
  hvactor::test::hvd_session s;
  std::vector<float> x(4, 1.0f);
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms + 300 * hvd::rank()));
  std::fill(x.begin(), x.end(), 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
  return x[0] == static_cast<float>(hvd::size()) ? took.count() : -1;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_SUITE("negotiation by name") {

TEST_CASE("ranks that submit named async allreduces in different orders get exact results, over "
          "shared memory and Gloo, 2 to 4 ranks, with and without the response cache") {
  struct variant {
    const char* shm;
    int n;
    const char* cache;
  };
  for (auto v : {variant{"1", 2, "1024"}, variant{"0", 2, "0"}, variant{"1", 3, "4"},
                 variant{"0", 3, "1024"}, variant{"1", 4, "0"}, variant{"0", 4, "16"}}) {
    CAPTURE(v.shm);
    CAPTURE(v.n);
    CAPTURE(v.cache);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = v.n,
                          .extra_env_vars = {{"HVACTOR_SHM", v.shm},
                                             {"HOROVOD_CACHE_CAPACITY", v.cache}}}};
    ex.start();
    auto sums = ex.run(&reversed_pair);
    double a = v.n * (v.n + 1) / 2.0;
    for (auto& s : sums)
      CHECK(s == std::vector<double>{a, 100.0 * a});
    for (int seed = 0; seed < 3; ++seed) {
      CAPTURE(seed);
      CHECK(ex.run(&permuted, seed) == std::vector<std::string>(static_cast<size_t>(v.n), ""));
    }
    ex.shutdown();
  }
}

TEST_CASE("the same name with different sizes on two ranks fails every rank with both ranks and "
          "both sizes") {
  for (const char* shm : {"0", "1"}) {
    CAPTURE(shm);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 10s}),
                         {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    auto errors = ex.run(&same_name_other_size);
    for (size_t r = 0; r < errors.size(); ++r) {
      CAPTURE(r);
      CAPTURE(errors[r]);
      CHECK(contains(errors[r], "Mismatched allreduce tensor sizes"));
      CHECK(contains(errors[r], "rank 0 sent a tensor 'w' of 10 elements"));
      CHECK(contains(errors[r], "rank 1 sent one of 11"));
    }
    ex.shutdown();
  }
}

TEST_CASE("a round that outlasts the negotiation heartbeat on the caller's thread leaves the "
          "engine thread asleep: rank 0 uses little CPU while a stopped peer holds it 1.4 s") {
  // The job's timeout of 3 s makes the heartbeat 750 ms; a stop of 1.4 s
  // stays inside CAF's 2 s connection timeout. The engine thread once
  // spun on the heartbeat's past deadline for the rest of such a round:
  // 0.6 s of CPU or more here.
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 3s}),
                         {.num_workers = 2, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    auto used = ex.run(&cpu_during_long_round, 1400);
    REQUIRE(used.size() == 2);
    CHECK(used[0] >= 0.0);
    CHECK(used[0] < 0.25);
    ex.shutdown();
  }
}

TEST_CASE("ranks idle for 20 s (their heartbeat rounds 8 s apart, then 15 s) answer the next "
          "allreduce as soon as the last rank submits it") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", "0"}}}};
  ex.start();
  auto took = ex.run(&idle_then_allreduce, 20000);
  REQUIRE(took.size() == 3);
  CAPTURE(took[0]);
  CAPTURE(took[1]);
  CAPTURE(took[2]);
  // Rank 0 waits for rank 2's submission 600 ms after its own; rank 2's
  // call finds the others waiting.
  CHECK(took[0] >= 500.0);
  CHECK(took[0] < 1600.0);
  CHECK(took[2] >= 0.0);
  CHECK(took[2] < 500.0);
  ex.shutdown();
}

TEST_CASE("a rank busy outside hvd calls for twice the job's timeout is a stall, not a failure: "
          "the others warn naming it and the tensor, on stderr and as an event, and finish") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 2s}),
                         {.num_workers = 2,
                          .extra_env_vars = {{"HVACTOR_SHM", shm},
                                             {"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"}}}};
    std::mutex mu;
    std::vector<std::map<std::string, std::string>> events;
    ex.on_event([&](int, const std::map<std::string, std::string>& f) {
      std::lock_guard<std::mutex> lk{mu};
      events.push_back(f);
    });
    ex.start();
    CHECK(ex.run(&pause_then_allreduce, 1, 4500) == std::vector<std::string>(2, "2.000000"));
    std::lock_guard<std::mutex> lk{mu};
    bool named = false;
    for (auto& e : events)
      if (e.count("event") && e.at("event") == "stall" && e.at("rank") == "0") {
        CAPTURE(e.at("message"));
        CHECK(e.at("waiting") == "late:1");
        CHECK(contains(e.at("message"), "'late' (ranks that have not submitted it: 1)"));
        named = true;
      }
    CHECK(named);
    ex.shutdown();
  }
}

TEST_CASE("with HOROVOD_STALL_SHUTDOWN_TIME_SECONDS, names that never pair fail every rank "
          "within the bound, naming the tensors and the ranks missing") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 10s}),
                         {.num_workers = n,
                          .extra_env_vars = {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"},
                                             {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "2"}}}};
    ex.start();
    auto t0 = std::chrono::steady_clock::now();
    auto errors = ex.run(&different_names);
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took < 6s);
    for (size_t r = 0; r < errors.size(); ++r) {
      CAPTURE(r);
      CAPTURE(errors[r]);
      CHECK(contains(errors[r], "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2"));
      CHECK(contains(errors[r], "(ranks that have not submitted it: "));
      CHECK(contains(errors[r], "grad/"));
      CHECK(contains(errors[r], "seen on rank " + std::to_string(r)));
    }
    ex.shutdown();
  }
}

TEST_CASE("a dead peer is not a stall: survivors waiting for a name a SIGKILLed rank never "
          "submitted fail within 2 s, with a 30 s timeout, over shared memory and Gloo") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::test::temp_dir dir;
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    CHECK_THROWS_AS(ex.run(&wait_for_dead_peer, dir.path().string()), hvactor::worker_error);
    hvactor::test::check_survivors_failed(dir.path(), {0, 2}, 2s);
    ex.shutdown();
  }
}

} // TEST_SUITE
