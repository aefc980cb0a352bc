#pragma once

// A worker function for failure tests of the collectives: every rank
// allreduces 8 MiB in a loop until it fails; rank `victim` SIGKILLs itself
// from another thread 300 ms in (in the middle of an allreduce), after
// writing the CLOCK_MONOTONIC time to DIR/killed. Every other rank writes
// "<kind> <peer> <monotonic ns when it failed> <message>" to DIR/rank-R
// (one line) and returns it. allreduce_until_stopped_then_killed stops
// one rank first.

#include <signal.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvactor::test {

inline int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

/// Writes `text` to `path` in one step (rename).
inline void write_whole(const std::string& path, const std::string& text) {
  std::ofstream{path + ".tmp"} << text;
  std::filesystem::rename(path + ".tmp", path);
}

/// The loop of allreduce_until_killed; rank `stopped` (-1: none) first
/// SIGSTOPs itself 300 ms in, and `victim` SIGKILLs itself 300 ms later.
inline std::string allreduce_until_failed(int stopped, int victim, const std::string& dir) {
  hvd::init();
  int me = hvd::rank();
  auto kill_at = std::chrono::milliseconds(stopped >= 0 ? 600 : 300);
  if (me == stopped)
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ::raise(SIGSTOP);
    }).detach();
  if (me == victim)
    std::thread([dir, kill_at] {
      std::this_thread::sleep_for(kill_at);
      write_whole(dir + "/killed", std::to_string(monotonic_ns()));
      ::raise(SIGKILL);
    }).detach();
  std::vector<float> x(2 << 20, 1.0f);
  std::string report;
  try {
    for (int i = 0; i < 100000; ++i)
      hvd::allreduce(std::span<float>(x), hvd::op::sum);
    report = "none -1 0 finished without an error";
  } catch (const collective_error& e) {
    report = "collective_error " + std::to_string(e.peer()) + " " + std::to_string(monotonic_ns())
             + " " + e.what();
  } catch (const std::exception& e) {
    report = "other -1 " + std::to_string(monotonic_ns()) + " " + e.what();
  }
  for (auto& c : report)
    if (c == '\n')
      c = ' ';
  write_whole(dir + "/rank-" + std::to_string(me), report);
  hvd::shutdown();
  return report;
}

inline std::string allreduce_until_killed(int victim, std::string dir) {
  return allreduce_until_failed(-1, victim, dir);
}

/// Rank `stopped` stops (SIGSTOP: its connections stay open, its node sees
/// no exit), then rank `victim` is killed: ranks waiting on the stopped
/// one learn of the death only from the driver.
inline std::string allreduce_until_stopped_then_killed(int stopped, int victim, std::string dir) {
  return allreduce_until_failed(stopped, victim, dir);
}

} // namespace hvactor::test
