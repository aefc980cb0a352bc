// Waiting costs no CPU: real processes that wait (SPMD ranks under
// hvactor-run waiting for each other in an allreduce, in hvd::join(), in a
// stall, on a process set; executor workers waiting to be called) are
// measured from /proc over a window of 3 s, per process and per thread,
// and each must stay under a tenth of a core. The shared-memory wait's
// short spin (knobs::shm_spin, at most knobs::shm_spin_max per wait) is
// within that bound: a waiting rank meets the others about once a second.
// And sleeping costs no time: a rank asleep on a peer's word is woken by
// the peer's post, not by its own sleep slice.

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "child_process.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

/// How long each measurement lasts, and the CPU a waiting process may use
/// over it (a fraction of one core).
constexpr auto window = 3s;
constexpr double cpu_bound = 0.10;

/// utime + stime of a /proc/.../stat line, in clock ticks (0 when gone).
long stat_ticks(const std::string& path) {
  std::ifstream in{path};
  std::string text{std::istreambuf_iterator<char>(in), {}};
  auto close = text.rfind(')');
  if (close == std::string::npos)
    return 0;
  std::istringstream fields{text.substr(close + 2)};
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
  return f.size() > 12 ? std::stol(f[11]) + std::stol(f[12]) : 0;
}

/// A process's threads: tid -> (name, ticks).
std::map<std::string, std::pair<std::string, long>> threads_of(int pid) {
  std::map<std::string, std::pair<std::string, long>> out;
  auto dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr)
    return out;
  while (auto* e = ::readdir(d)) {
    std::string tid = e->d_name;
    if (tid == "." || tid == "..")
      continue;
    std::ifstream comm{dir + "/" + tid + "/comm"};
    std::string name;
    std::getline(comm, name);
    out[tid] = {name, stat_ticks(dir + "/" + tid + "/stat")};
  }
  ::closedir(d);
  return out;
}

/// CPU used by one process over the window, as a fraction of a core, and
/// its threads' shares ("hvd.engine 0.48, caf.multiplexer 0.01").
struct usage {
  int pid = 0;
  double cpu = 0;
  std::string threads;
};

std::vector<usage> measure(const std::vector<int>& pids) {
  static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::vector<long> before;
  std::vector<std::map<std::string, std::pair<std::string, long>>> threads_before;
  for (int pid : pids) {
    before.push_back(stat_ticks("/proc/" + std::to_string(pid) + "/stat"));
    threads_before.push_back(threads_of(pid));
  }
  std::this_thread::sleep_for(window);
  std::vector<usage> out;
  double seconds = std::chrono::duration<double>(window).count();
  for (size_t i = 0; i < pids.size(); ++i) {
    usage u;
    u.pid = pids[i];
    u.cpu = (stat_ticks("/proc/" + std::to_string(pids[i]) + "/stat") - before[i]) / hz / seconds;
    for (auto& [tid, now] : threads_of(pids[i])) {
      auto was = threads_before[i].count(tid) ? threads_before[i][tid].second : 0;
      if (now.second > was)
        u.threads += now.first + " " + std::to_string((now.second - was) / hz / seconds) + ", ";
    }
    out.push_back(u);
  }
  return out;
}

/// hvactor-run -np `ranks` wait_program `mode` 5 (environment `env`):
/// waits until every rank waits, measures each rank and the launcher, and
/// checks that every one stays under the bound; then that the ranks
/// finish, and how long the wait's end took to reach them.
void check_waiting_job(const std::string& mode, int ranks, std::vector<std::string> env = {}) {
  temp_dir dir;
  std::vector<std::string> argv{HVACTOR_RUN, "-np", std::to_string(ranks)};
  for (auto& e : env) {
    argv.push_back("-x");
    argv.push_back(e);
  }
  for (std::string a : {"--", HVACTOR_WAIT_PROGRAM, mode.c_str(), "5"})
    argv.push_back(a);
  process launcher{argv, dir.path() / "run"};
  std::vector<int> pids;
  for (int i = 0; i < ranks; ++i) {
    auto line = launcher.read_line_with("[1,", 60s);
    INFO("stderr:\n" << launcher.stderr_text());
    REQUIRE(line);
    auto pos = line->find("pid ");
    REQUIRE(pos != std::string::npos);
    pids.push_back(std::stoi(line->substr(pos + 4)));
  }
  // Past the start of every wait (the first rounds, the spin) into the
  // waiting itself.
  std::this_thread::sleep_for(1s);
  pids.push_back(launcher.pid());
  for (auto& u : measure(pids)) {
    std::string who = u.pid == launcher.pid() ? "hvactor-run" : "rank";
    MESSAGE(mode << ": " << who << " pid " << u.pid << " used " << u.cpu
                 << " of a core while waiting: " << u.threads);
    CHECK(u.cpu < cpu_bound);
  }
  auto exit = launcher.wait_exit(60s);
  INFO("stdout:\n" << launcher.stdout_text() << "\nstderr:\n" << launcher.stderr_text());
  REQUIRE(exit);
  CHECK(exit->success());
  std::smatch m;
  auto out = launcher.stdout_text();
  std::regex resolved{R"(resolved rank (\d+) ms (\d+))"};
  int seen = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), resolved);
       it != std::sregex_iterator(); ++it, ++seen)
    MESSAGE(mode << ": rank " << (*it)[1] << " finished " << (*it)[2]
                 << " ms after the wait ended");
  CHECK(seen == ranks);
}

int own_pid() {
  return static_cast<int>(::getpid());
}

int pid_in_session() {
  hvactor::hvd::init();
  std::vector<float> x{1.0f};
  hvactor::hvd::allreduce(std::span<float>(x), hvactor::hvd::op::sum);
  return static_cast<int>(::getpid());
}

void end_session() {
  hvactor::hvd::shutdown();
}

int64_t monotonic_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

/// `rounds` allreduces of `floats` elements in which the last rank posts
/// `delay_ms` after the others entered (they sleep on its word by then,
/// past their spin); on rank 0, how long after that post each call
/// returned, in us (the steady clock is the machine's, the same in every
/// process). Empty on the other ranks.
std::vector<int64_t> woken_after(int delay_ms, int rounds, int floats) {
  namespace hvd = hvactor::hvd;
  hvd::init();
  std::vector<int64_t> out;
  std::vector<float> x(static_cast<size_t>(floats));
  for (int r = 0; r < rounds; ++r) {
    std::fill(x.begin(), x.end(), 1.0f);
    hvd::barrier();
    std::vector<int64_t> posted{0};
    if (hvd::rank() == hvd::size() - 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      posted[0] = monotonic_us();
    }
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    int64_t done = monotonic_us();
    if (x.front() != static_cast<float>(hvd::size()))
      throw std::runtime_error("woken_after: wrong sum " + std::to_string(x.front()));
    hvd::allreduce(std::span<int64_t>(posted), hvd::op::max);
    if (hvd::rank() == 0)
      out.push_back(done - posted[0]);
  }
  hvd::shutdown();
  return out;
}

} // namespace

TEST_SUITE("wait_cpu") {

TEST_CASE("a rank waiting in an allreduce for a rank busy elsewhere uses under a tenth of a "
          "core") {
  check_waiting_job("allreduce", 2);
}

TEST_CASE("a rank waiting in hvd::join() uses under a tenth of a core") {
  check_waiting_job("join", 2);
}

TEST_CASE("ranks in a stall (each submitted a tensor the other did not) use under a tenth of a "
          "core each, over shared memory and over Gloo") {
  check_waiting_job("stall", 2);
  check_waiting_job("stall", 2, {"HVACTOR_SHM=0"});
}

TEST_CASE("ranks stalled on a process set, and a rank in hvd::join() meanwhile, use under a "
          "tenth of a core each") {
  check_waiting_job("set_stall", 2);
  check_waiting_job("stall", 3);
}

TEST_CASE("executor workers waiting to be called use under a tenth of a core, with and "
          "without an hvd session") {
  auto settings = hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
  hvactor::executor ex{test_runtime(), settings, {.num_workers = 2}};
  ex.start();
  auto pids = ex.run(&own_pid);
  std::this_thread::sleep_for(500ms);
  for (auto& u : measure(pids)) {
    MESSAGE("idle worker pid " << u.pid << " used " << u.cpu << " of a core: " << u.threads);
    CHECK(u.cpu < cpu_bound);
  }
  ex.run(&pid_in_session);
  std::this_thread::sleep_for(1s);
  for (auto& u : measure(pids)) {
    MESSAGE("worker pid " << u.pid << " in an hvd session used " << u.cpu << " of a core: "
                          << u.threads);
    CHECK(u.cpu < cpu_bound);
  }
  ex.run(&end_session);
  ex.shutdown();
}

TEST_CASE("a rank asleep on a shared-memory word is woken within milliseconds of its peer's "
          "post, small and chunked allreduces, 2 ranks and more ranks than cores") {
  // A sleep wakes by itself every knobs::shm_sleep_slice (20 ms): a post
  // that failed to wake the sleeper shows as 10 ms late on average.
  // Delays past the spin (at most 16 ms) or, with more ranks than cores,
  // past the yielding (50 ms).
  auto settings = hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
  for (int n : {2, 3}) {
    hvactor::executor ex{test_runtime(), settings, {.num_workers = n}};
    ex.start();
    int delay_ms = n == 2 ? 30 : 80;
    for (int floats : {4, 65536}) {
      CAPTURE(n);
      CAPTURE(floats);
      auto late = ex.run(&woken_after, delay_ms, 9, floats).at(0);
      REQUIRE(late.size() == 9);
      std::string text;
      for (auto us : late)
        text += std::to_string(us) + " ";
      MESSAGE(n << " ranks, " << floats * 4 << " B: returned " << text << "us after the post");
      std::nth_element(late.begin(), late.begin() + 4, late.end());
      CHECK(late[4] < 5000);
    }
    ex.shutdown();
  }
}

} // TEST_SUITE
