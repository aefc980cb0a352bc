// hvd collectives that fail, between real worker processes: calls outside
// init/shutdown, ranks that disagree on names or shapes, a rank
// that never calls init (rendezvous timeout), a rank SIGKILLed in the middle
// of a long allreduce. Every failure must be a clear hvactor error on every
// surviving rank within the job's timeout, never a hang or a dead survivor.

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "hvd_session.hpp"
#include "test_main.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

using session = hvactor::test::hvd_session;

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// Writes `text` to `path` in one step (rename), so that a reader never sees
/// half of it.
void write_file(const std::filesystem::path& path, const std::string& text) {
  auto tmp = path;
  tmp += ".tmp";
  std::ofstream{tmp} << text;
  std::filesystem::rename(tmp, path);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in{path};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// An async allreduce under `name` (rank 0 uses `name0`, the others
/// `name_other`); returns the collective_error's text, or "" when it
/// succeeded with the right sum.
std::string named_allreduce(std::string name0, std::string name_other) {
  session s;
  std::vector<float> x(10, 1.0f);
  auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum,
                                hvd::rank() == 0 ? name0 : name_other);
  try {
    hvd::synchronize(h);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  for (float v : x)
    if (v != static_cast<float>(hvd::size()))
      return "wrong sum " + std::to_string(v);
  return "";
}

/// Rank 0 allreduces while the others broadcast; returns the error's text.
std::string allreduce_against_broadcast() {
  session s;
  std::vector<double> x(3, 1.0);
  try {
    if (hvd::rank() == 0)
      hvd::allreduce(std::span<double>(x), hvd::op::sum);
    else
      hvd::broadcast(std::span<double>(x), 0);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return "";
}

/// Every rank runs the collective `what` with a size or type that depends on
/// its rank. Returns the error's text ("no error" when none), "|", and the
/// sum of a matching allreduce run afterwards (the collectives stay usable).
std::string mismatched(std::string what) {
  session s;
  int r = hvd::rank();
  std::string text = "no error";
  try {
    if (what == "allreduce count") {
      std::vector<float> x(10 + static_cast<size_t>(r), 1.0f);
      hvd::allreduce(std::span<float>(x), hvd::op::sum);
    } else if (what == "async allreduce count") {
      std::vector<float> x(10 + static_cast<size_t>(r), 1.0f);
      auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "grad/w");
      hvd::synchronize(h);
    } else if (what == "allreduce dtype") {
      std::vector<float> f(8, 1.0f);
      std::vector<double> d(8, 1.0);
      if (r == 0)
        hvd::allreduce(std::span<float>(f), hvd::op::sum);
      else
        hvd::allreduce(std::span<double>(d), hvd::op::sum);
    } else if (what == "broadcast count") {
      std::vector<double> x(5 + static_cast<size_t>(r), 1.0);
      hvd::broadcast(std::span<double>(x), 0);
    } else if (what == "allgather dtype") {
      std::vector<float> f(3, 1.0f);
      std::vector<int32_t> i(3, 1);
      if (r == 0)
        hvd::allgather(std::span<const float>(f));
      else
        hvd::allgather(std::span<const int32_t>(i));
    } else if (what == "alltoall dtype") {
      std::vector<float> f(static_cast<size_t>(hvd::size()), 1.0f);
      std::vector<double> d(static_cast<size_t>(hvd::size()), 1.0);
      if (r == 0)
        hvd::alltoall(std::span<const float>(f));
      else
        hvd::alltoall(std::span<const double>(d));
    }
  } catch (const hvactor::collective_error& e) {
    text = e.what();
  } catch (const std::exception& e) {
    text = std::string{"not a collective_error: "} + e.what();
  }
  int64_t one = 1;
  hvd::allreduce(std::span<int64_t>(&one, 1), hvd::op::sum);
  return text + "|" + std::to_string(one);
}

/// Every rank but `absent` calls hvd::init().
std::string init_unless(int absent) {
  if (std::atoi(std::getenv("HOROVOD_RANK")) == absent)
    return "stayed away";
  session s;
  return "joined";
}

/// Rank 0 calls hvd::init() at once, every other rank but `absent` 1.2 s
/// later; returns what init threw ("joined" when it did not).
std::string init_late_unless(int absent) {
  int rank = std::atoi(std::getenv("HOROVOD_RANK"));
  if (rank == absent)
    return "stayed away";
  if (rank != 0)
    std::this_thread::sleep_for(1200ms);
  try {
    session s;
  } catch (const hvactor::error& e) {
    return e.what();
  }
  return "joined";
}

/// After whatever happened before, a full init and allreduce works.
int64_t init_and_sum() {
  session s;
  int64_t x = hvd::rank() + 1;
  hvd::allreduce(std::span<int64_t>(&x, 1), hvd::op::sum);
  return x;
}

/// Loops allreduces of 4 Mi floats (16 MiB). Rank `victim` SIGKILLs itself
/// after 300 ms, writing the time to <dir>/killed first. Every other rank writes how its failure
/// looked to <dir>/rank-<r>: the exception kind, how long the failing call
/// ran (ms), when it failed (epoch ms), the peer it names, and its text.
std::string allreduce_until_failure(std::string dir, int victim) {
  session s;
  int me = hvd::rank();
  if (me == victim) {
    std::thread([dir] {
      std::this_thread::sleep_for(300ms);
      write_file(std::filesystem::path(dir) / "killed", std::to_string(epoch_ms()));
      ::raise(SIGKILL);
    }).detach();
  }
  std::vector<float> x(size_t{4} << 20, 1.0f);
  std::string outcome = "none\n0\n0\n-1\nno error within 60 s";
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto t0 = std::chrono::steady_clock::now();
    auto report = [&](const char* kind, int peer, const char* what) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
      return std::string{kind} + "\n" + std::to_string(ms) + "\n" + std::to_string(epoch_ms())
             + "\n" + std::to_string(peer) + "\n" + what;
    };
    try {
      hvd::allreduce(std::span<float>(x), hvd::op::average);
    } catch (const hvactor::collective_error& e) {
      outcome = report("collective_error", e.peer(), e.what());
      break;
    } catch (const hvactor::error& e) {
      outcome = report("hvactor::error", -1, e.what());
      break;
    } catch (const std::exception& e) {
      outcome = report("std::exception", -1, e.what());
      break;
    }
  }
  write_file(std::filesystem::path(dir) / ("rank-" + std::to_string(me)), outcome);
  return outcome;
}

/// After hvd::init(): writes to a socket whose other end is closed; returns
/// errno (EPIPE), unless SIGPIPE kills the process first.
int write_to_closed_socket() {
  session s;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
    return -1;
  ::close(fds[1]);
  char byte = 1;
  auto n = ::write(fds[0], &byte, 1);
  int err = n < 0 ? errno : 0;
  ::close(fds[0]);
  return err;
}

void add(std::string& found, const std::string& what) {
  found += what + "\n";
}

/// The calls that need hvd::init(), each of which must throw not_started.
std::string calls_refused_before_init() {
  std::string found;
  std::vector<float> x(4, 1.0f);
  auto refused = [&](const char* what, auto&& call) {
    try {
      call();
      add(found, std::string{what} + " did not throw");
    } catch (const hvactor::not_started&) {
    } catch (const std::exception& e) {
      add(found, std::string{what} + " threw another error: " + e.what());
    }
  };
  if (hvd::is_initialized())
    add(found, "is_initialized() before init()");
  refused("rank", [] { hvd::rank(); });
  refused("size", [] { hvd::size(); });
  refused("local_rank", [] { hvd::local_rank(); });
  refused("cross_size", [] { hvd::cross_size(); });
  refused("allreduce", [&] { hvd::allreduce(std::span<float>(x), hvd::op::sum); });
  refused("allreduce_async", [&] { hvd::allreduce_async(std::span<float>(x)); });
  refused("allgather", [&] { hvd::allgather(std::span<const float>(x)); });
  refused("broadcast", [&] { hvd::broadcast(std::span<float>(x), 0); });
  refused("alltoall", [&] { hvd::alltoall(std::span<const float>(x)); });
  refused("barrier", [] { hvd::barrier(); });
  return found;
}

/// init, one allreduce, shutdown: then every call is refused again.
std::string refused_after_shutdown() {
  {
    session s;
    int64_t x = 1;
    hvd::allreduce(std::span<int64_t>(&x, 1), hvd::op::sum);
  }
  return calls_refused_before_init();
}

// In a worker: an allgather (`mode` 0) or alltoall (1) of float32 on rank
// 0 and float64 elsewhere, then an allgather that matches; the first one's
// error ("collective_error: ..." or "other: ...") and the second one's sum.
std::pair<std::string, double> mismatched_dtypes(int mode) {
  hvd::init();
  std::vector<float> f(4, 1.0f);
  std::vector<double> d(4, 1.0);
  std::string text = "none";
  try {
    bool floats = hvd::rank() == 0;
    if (mode == 0 && floats)
      hvd::allgather(std::span<const float>(f));
    else if (mode == 0)
      hvd::allgather(std::span<const double>(d));
    else if (floats)
      hvd::alltoall(std::span<const float>(f));
    else
      hvd::alltoall(std::span<const double>(d));
  } catch (const hvactor::collective_error& e) {
    text = std::string("collective_error: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("other: ") + e.what();
  }
  double sum = 0;
  for (auto x : hvd::allgather(std::span<const double>(d)))
    sum += x;
  hvd::shutdown();
  return {text, sum};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A fresh temporary directory, removed on destruction.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& name)
    : path(std::filesystem::temp_directory_path()
           / ("hvactor-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

/// Runs allreduce_until_failure on `n` ranks with rank 1 as the victim
/// and checks what every survivor reported.
void check_survivors_fail(int n) {
  constexpr auto timeout = 5s;
  constexpr int victim = 1;
  temp_dir dir{"kill"};
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = timeout}),
                       {.num_workers = n}};
  ex.start();
  auto pids = ex.worker_pids();
  // run() fails as soon as a rank dies; the survivors go on until their
  // collective fails and report through files.
  std::string run_error;
  int failed_rank = -1;
  try {
    ex.run(&allreduce_until_failure, dir.path.string(), victim);
  } catch (const hvactor::worker_error& e) {
    run_error = e.what();
    failed_rank = e.rank();
  }
  CAPTURE(run_error);
  CHECK(failed_rank == victim);
  CHECK(contains(run_error, "SIGKILL"));
  auto report_of = [&](int r) { return dir.path / ("rank-" + std::to_string(r)); };
  hvactor::test::wait_until(
    [&] {
      for (int r = 0; r < n; ++r)
        if (r != victim && !std::filesystem::exists(report_of(r)))
          return false;
      return true;
    },
    15s);
  auto killed_text = read_file(dir.path / "killed");
  REQUIRE_FALSE(killed_text.empty());
  int64_t killed_at = std::stoll(killed_text);
  bool someone_names_victim = false;
  for (int r = 0; r < n; ++r) {
    if (r == victim)
      continue;
    CAPTURE(r);
    if (!std::filesystem::exists(report_of(r))) {
      bool alive = hvactor::test::pid_alive(pids[static_cast<size_t>(r)]);
      FAIL_CHECK("rank " << r << " never reported within 15 s; its process is "
                         << std::string{alive ? "alive (hung?)" : "dead (SIGPIPE?)"});
      continue;
    }
    std::istringstream in{read_file(report_of(r))};
    std::string kind, what;
    int64_t call_ms = 0, failed_at = 0;
    int peer = -1;
    in >> kind >> call_ms >> failed_at >> peer;
    in.ignore(1);
    std::getline(in, what, '\0');
    CAPTURE(kind);
    CAPTURE(what);
    CHECK(kind == "collective_error");
    CHECK(contains(what, "failed on rank " + std::to_string(r)));
    CHECK(contains(what, "peer"));
    CHECK(failed_at >= killed_at);
    CHECK(failed_at - killed_at < std::chrono::milliseconds(timeout + 2s).count());
    CHECK(call_ms < std::chrono::milliseconds(timeout + 2s).count());
    if (n == 2)
      CHECK(peer == victim);
    if (peer == victim && contains(what, "peer rank 1"))
      someone_names_victim = true;
  }
  // The victim's ring neighbours see its connection close and name it.
  CHECK(someone_names_victim);
  CHECK_NOTHROW(ex.shutdown());
  CHECK(hvactor::test::all_gone(pids, 2s));
}

/// Over Gloo (HVACTOR_SHM=0), SIGKILLs rank 1 of 3 in the middle of
/// allreduces, `rounds` times; every survivor's error must name rank 1 or
/// say that it does not know which rank failed, never a live rank. Returns
/// how many survivors named rank 1.
int check_blame_over_gloo(int rounds) {
  constexpr int n = 3, victim = 1;
  int named = 0;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    temp_dir dir{"blame"};
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 5s}),
                         {.num_workers = n, .extra_env_vars = {{"HVACTOR_SHM", "0"}}}};
    ex.start();
    try {
      ex.run(&allreduce_until_failure, dir.path.string(), victim);
    } catch (const hvactor::worker_error&) {
    }
    auto report_of = [&](int r) { return dir.path / ("rank-" + std::to_string(r)); };
    hvactor::test::wait_until(
      [&] {
        return std::filesystem::exists(report_of(0)) && std::filesystem::exists(report_of(2));
      },
      15s);
    for (int r : {0, 2}) {
      CAPTURE(r);
      std::istringstream in{read_file(report_of(r))};
      std::string kind, what;
      int64_t call_ms = 0, failed_at = 0;
      int peer = -2;
      in >> kind >> call_ms >> failed_at >> peer;
      in.ignore(1);
      std::getline(in, what, '\0');
      CAPTURE(what);
      CHECK(kind == "collective_error");
      CHECK((peer == victim || peer == -1));
      for (int live : {0, 2})
        CHECK_FALSE(contains(what, "peer rank " + std::to_string(live)));
      if (peer == victim) {
        CHECK(contains(what, "peer rank 1"));
        ++named;
      } else {
        CHECK(contains(what, "not known"));
      }
    }
    CHECK_NOTHROW(ex.shutdown());
  }
  return named;
}

/// Over Gloo, 4 ranks: rank 3 dies at once, rank 0 is busy (alive, its
/// program never calls the collective; its engine still negotiates), ranks
/// 1 and 2 allreduce after 1 s. Ranks 1 and 2 report their failure's kind,
/// how long the call ran (ms) and its text.
std::string wait_on_stalled_peer(std::string dir) {
  session s;
  int me = hvd::rank();
  if (me == 3)
    ::raise(SIGKILL);
  if (me == 0) {
    std::this_thread::sleep_for(40s); // busy; shutdown() ends it
    return "busy";
  }
  std::this_thread::sleep_for(1s); // rank 3's connections are closed by now
  std::vector<float> x(size_t{1} << 20, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  std::string outcome;
  try {
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    outcome = "none\n0\nno error";
  } catch (const std::exception& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0)
                .count();
    outcome = std::string{dynamic_cast<const hvactor::collective_error*>(&e) ? "collective_error"
                                                                              : "other"}
              + "\n" + std::to_string(ms) + "\n" + e.what();
  }
  write_file(std::filesystem::path(dir) / ("rank-" + std::to_string(me)), outcome);
  return outcome;
}


/// Three ranks over Gloo: rank 0 freezes (SIGSTOP: alive, its connections
/// open, it never answers); rank 2 gives up on it after a 2 s Gloo timeout,
/// rank 1 would wait 20 s. Ranks 1 and 2 report their failure's kind, when
/// it came (ms since the epoch) and its text.
std::string wait_on_frozen_peer(std::string dir) {
  if (std::atoi(std::getenv("HOROVOD_RANK")) == 2)
    ::setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "2", 1);
  session s;
  int me = hvd::rank();
  if (me == 0) {
    ::raise(SIGSTOP); // the test continues it once the others reported
    return "frozen";
  }
  std::vector<float> x(16, 1.0f);
  std::string outcome;
  try {
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    outcome = "none\n0\nno error";
  } catch (const std::exception& e) {
    outcome = std::string{dynamic_cast<const hvactor::collective_error*>(&e) ? "collective_error"
                                                                              : "other"}
              + "\n" + std::to_string(epoch_ms()) + "\n" + e.what();
  }
  write_file(std::filesystem::path(dir) / ("rank-" + std::to_string(me)), outcome);
  return outcome;
}

} // namespace

TEST_SUITE("hvd collective failures") {

TEST_CASE("calls before hvd::init() and after hvd::shutdown() throw not_started, in workers "
          "and in the driver") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 2}};
  ex.start();
  CHECK(ex.run(&calls_refused_before_init) == std::vector<std::string>(2, ""));
  CHECK(ex.run(&refused_after_shutdown) == std::vector<std::string>(2, ""));
  ex.shutdown();
  hvd::shutdown(); // no-op unless an earlier case left the driver's open
  CHECK(calls_refused_before_init() == "");
  CHECK(refused_after_shutdown() == "");
}

TEST_CASE("named allreduces pair by name, and unnamed collectives that differ in kind fail on "
          "every rank with a collective_error naming both") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = n}};
    ex.start();
    // Matching names work.
    CHECK(ex.run(&named_allreduce, std::string{"grad/w"}, std::string{"grad/w"})
          == std::vector<std::string>(static_cast<size_t>(n), ""));
    // Different operations are named too.
    auto kinds = ex.run(&allreduce_against_broadcast);
    for (int r = 0; r < n; ++r) {
      auto& what = kinds[static_cast<size_t>(r)];
      CAPTURE(r);
      CAPTURE(what);
      CHECK(contains(what, "allreduce"));
      CHECK(contains(what, "broadcast"));
    }
    // After shutdown() and init() the ranks work together again.
    CHECK(ex.run(&init_and_sum)
          == std::vector<int64_t>(static_cast<size_t>(n), int64_t{n * (n + 1) / 2}));
    ex.shutdown();
  }
}

TEST_CASE("ranks that pass different sizes or types to one collective all fail with a "
          "collective_error naming both ranks and both values, over Gloo and shared memory, and "
          "the collectives stay usable") {
  // Over Gloo (HVACTOR_SHM=0) a different element count used to abort rank
  // 0 from Gloo's own thread (gloo::EnforceNotMet, SIGABRT).
  struct variant {
    std::string what;
    std::vector<std::string> parts;
  };
  std::vector<variant> variants{
    {"allreduce count",
     {"Mismatched allreduce tensor sizes", "rank 0 sent a tensor of 10 elements", "sent one of 11"}},
    {"async allreduce count",
     {"Mismatched allreduce tensor sizes", "rank 0 sent a tensor 'grad/w' of 10 elements",
      "sent one of 11"}},
    {"allreduce dtype", {"Mismatched allreduce data types", "rank 0 sent float32", "sent float64"}},
    {"broadcast count",
     {"Mismatched broadcast tensor sizes", "rank 0 sent a tensor of 5 elements", "sent one of 6"}},
    {"allgather dtype", {"Mismatched allgather data types", "rank 0 sent float32", "sent int32"}},
    {"alltoall dtype", {"Mismatched alltoall data types", "rank 0 sent float32", "sent float64"}}};
  for (const char* shm : {"0", "1"}) {
    for (int n : {2, 3}) {
      CAPTURE(shm);
      CAPTURE(n);
      hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 10s}),
                           {.num_workers = n, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
      ex.start();
      for (auto& v : variants) {
        CAPTURE(v.what);
        std::vector<std::string> results;
        std::string run_error;
        try {
          results = ex.run(&mismatched, v.what);
        } catch (const hvactor::worker_error& e) {
          run_error = e.what();
        }
        CAPTURE(run_error);
        REQUIRE(results.size() == static_cast<size_t>(n));
        for (int r = 0; r < n; ++r) {
          auto& what = results[static_cast<size_t>(r)];
          CAPTURE(r);
          CAPTURE(what);
          for (auto& part : v.parts)
            CHECK(contains(what, part));
          CHECK(contains(what, "seen on rank " + std::to_string(r)));
          CHECK(contains(what, "|" + std::to_string(n)));
        }
      }
      ex.shutdown();
    }
  }
}

TEST_CASE("a rank that never calls init fails the others' init with rendezvous_timeout naming it "
          "within the timeout, and the executor still shuts down") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 2s}),
                         {.num_workers = n}};
    ex.start();
    auto pids = ex.worker_pids();
    auto t0 = std::chrono::steady_clock::now();
    std::string what;
    int failed_rank = -1;
    try {
      ex.run(&init_unless, 1);
    } catch (const hvactor::worker_error& e) {
      what = e.what();
      failed_rank = e.rank();
    }
    auto elapsed = std::chrono::steady_clock::now() - t0;
    CAPTURE(what);
    if (n == 2)
      CHECK(failed_rank == 0);
    CHECK(failed_rank != 1);
    CHECK(failed_rank >= 0);
    CHECK(contains(what, "rendezvous"));
    CHECK(contains(what, "rank 1 of " + std::to_string(n)));
    CHECK(elapsed >= 1900ms);
    CHECK(elapsed < 2s + 4s);
    // The workers survived their exception: a full init works afterwards.
    CHECK(ex.run(&init_and_sum)
          == std::vector<int64_t>(static_cast<size_t>(n), int64_t{n * (n + 1) / 2}));
    auto t1 = std::chrono::steady_clock::now();
    CHECK_NOTHROW(ex.shutdown());
    CHECK(std::chrono::steady_clock::now() - t1 < 5s);
    CHECK(hvactor::test::all_gone(pids, 2s));
  }
}

TEST_CASE("a rank that came first and gave up at its own bound is not said to have never joined "
          "the rendezvous: the ranks that came later name only the absent one") {
  const int n = 4;
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 2s}),
                       {.num_workers = n}};
  ex.start();
  auto said = ex.run(&init_late_unless, 1);
  REQUIRE(said.size() == static_cast<size_t>(n));
  CHECK(said[1] == "stayed away");
  for (int r : {0, 2, 3}) {
    CAPTURE(r);
    auto& what = said[static_cast<size_t>(r)];
    CAPTURE(what);
    CHECK(contains(what, "rank 1 of 4 never joined the collectives rendezvous"));
    if (r != 0)
      CHECK(contains(what, "came but gave up at their own bound: 0"));
  }
  ex.shutdown();
}

TEST_CASE("a rank SIGKILLed in the middle of a long allreduce makes every other rank fail with "
          "a collective_error within the timeout, never a hang") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    check_survivors_fail(n);
  }
}

TEST_CASE("over Gloo, when rank 1 of 3 is SIGKILLed again and again, no survivor ever blames a "
          "live rank: each names rank 1 or says the failed rank is not known") {
  int named = check_blame_over_gloo(8);
  MESSAGE(named << " of 16 survivor errors named rank 1");
  CHECK(named >= 8);
}

TEST_CASE("over Gloo, with one rank dead and one busy elsewhere, the others fail within 5 s, not "
          "after the 20 s timeout, and never blame a live rank") {
  temp_dir dir{"busy"};
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 4, .extra_env_vars = {{"HVACTOR_SHM", "0"}}}};
  ex.start();
  auto pids = ex.worker_pids();
  try {
    ex.run(&wait_on_stalled_peer, dir.path.string());
  } catch (const hvactor::worker_error&) {
  }
  auto report_of = [&](int r) { return dir.path / ("rank-" + std::to_string(r)); };
  hvactor::test::wait_until(
    [&] { return std::filesystem::exists(report_of(1)) && std::filesystem::exists(report_of(2)); },
    30s);
  for (int r : {1, 2}) {
    CAPTURE(r);
    std::istringstream in{read_file(report_of(r))};
    std::string kind, what;
    int64_t ms = -1;
    in >> kind >> ms;
    in.ignore(1);
    std::getline(in, what, '\0');
    CAPTURE(what);
    CHECK(kind == "collective_error");
    CHECK(ms >= 0);
    CHECK(ms < 5000); // the timeout is 20 s
    CHECK((contains(what, "peer rank 3") || contains(what, "not known")));
    for (int live : {0, 1, 2})
      CHECK_FALSE(contains(what, "peer rank " + std::to_string(live)));
  }
  CHECK_NOTHROW(ex.shutdown());
  CHECK(hvactor::test::all_gone(pids, 5s));
}

TEST_CASE("over Gloo, once one rank's call failed (a peer frozen past its timeout), every other "
          "rank's call fails within a second, not after its own longer timeout") {
  // The same path stops a rank that Gloo leaves waiting on a send to a
  // peer that died (a parked send is never told of the close).
  temp_dir dir{"frozen"};
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", "0"}}}};
  ex.start();
  auto pids = ex.worker_pids();
  auto futures = ex.run_remote(&wait_on_frozen_peer, dir.path.string());
  auto report_of = [&](int r) { return dir.path / ("rank-" + std::to_string(r)); };
  hvactor::test::wait_until(
    [&] { return std::filesystem::exists(report_of(1)) && std::filesystem::exists(report_of(2)); },
    40s);
  for (auto pid : pids)
    ::kill(pid, SIGCONT);
  std::map<int, int64_t> at;
  std::map<int, std::string> text;
  for (int r : {1, 2}) {
    CAPTURE(r);
    std::istringstream in{read_file(report_of(r))};
    std::string kind;
    in >> kind >> at[r];
    in.ignore(1);
    std::getline(in, text[r], '\0');
    CAPTURE(text[r]);
    CHECK(kind == "collective_error");
  }
  CAPTURE(text[1]);
  // Rank 2 failed first (its timeout on frozen rank 0, whom it names: the
  // small call's exchange reads each peer's pair itself); rank 1 stopped
  // at its announcement.
  CHECK(contains(text[2], "peer rank 0 did not answer within 2 s"));
  CHECK(contains(text[1], "peer rank 0 failed first (rank 2 saw it and told every rank)"));
  CHECK(at[1] - at[2] < 1500);
  CHECK(at[1] - at[2] > -1500);
  for (auto& f : futures) {
    try {
      f.get();
    } catch (const std::exception&) {
    }
  }
  CHECK_NOTHROW(ex.shutdown());
  CHECK(hvactor::test::all_gone(pids, 5s));
}

TEST_CASE("after hvd::init a write to a socket whose peer closed returns EPIPE instead of "
          "killing the worker with SIGPIPE") {
  // What Gloo's TCP transport does when a peer dies while this rank sends
  // to it (writev without MSG_NOSIGNAL; Gloo's own tests ignore SIGPIPE).
  // A rank killed by SIGPIPE never reports its collective_error.
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 2}};
  ex.start();
  std::vector<int> errnos;
  std::string what;
  try {
    errnos = ex.run(&write_to_closed_socket);
  } catch (const hvactor::worker_error& e) {
    what = e.what();
  }
  CAPTURE(what);
  CHECK(errnos == std::vector<int>(2, EPIPE));
  ex.shutdown();
}

TEST_CASE("allgather and alltoall with another dtype on one rank give every rank a "
          "collective_error naming both dtypes, on shared memory and on Gloo") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    auto gathered = ex.run(&mismatched_dtypes, 0);
    auto exchanged = ex.run(&mismatched_dtypes, 1);
    ex.shutdown();
    // The engine's check before every collective, or the counts' own
    // check behind it, whichever sees it first: both name both dtypes.
    for (auto* results : {&gathered, &exchanged})
      for (auto& [text, sum] : *results) {
        CHECK(text.rfind("collective_error: ", 0) == 0);
        CHECK(text.find("rank 0") != std::string::npos);
        CHECK(text.find("rank 1") != std::string::npos);
        CHECK(text.find("float32") != std::string::npos);
        CHECK(text.find("float64") != std::string::npos);
        CHECK(sum == 8.0); // the next allgather works
      }
  }
}

} // TEST_SUITE
