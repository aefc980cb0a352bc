#pragma once

// A rank SIGKILLs itself while the others wait in a collective; how fast
// the survivors fail. The victim writes <dir>/killed (epoch ms) right
// before it dies; each survivor writes <dir>/rank-<r>: the epoch ms its
// call failed, a newline, and the error's text ("no error" when none).

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "test_support.hpp"

namespace hvactor::test {

inline int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

/// In the victim: records the time, then SIGKILLs this process.
[[noreturn]] inline void die_now(const std::string& dir) {
  std::ofstream(std::filesystem::path(dir) / "killed") << epoch_ms();
  ::raise(SIGKILL);
  std::abort();
}

/// In a survivor: records when its call ended and how.
inline void report_failure(const std::string& dir, int rank, const std::string& outcome) {
  std::ofstream(std::filesystem::path(dir) / ("rank-" + std::to_string(rank)))
    << epoch_ms() << "\n"
    << outcome;
}

/// In the test: every survivor in `ranks` reported an error within `bound`
/// of the kill.
inline void check_survivors_failed(const std::filesystem::path& dir, const std::vector<int>& ranks,
                                   std::chrono::milliseconds bound) {
  for (int r : ranks) {
    CAPTURE(r);
    auto report = dir / ("rank-" + std::to_string(r));
    REQUIRE(wait_until([&] { return std::filesystem::exists(report); },
                       std::chrono::seconds(15)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50)); // written whole
    std::ifstream killed(dir / "killed"), in(report);
    int64_t killed_at = 0, failed_at = 0;
    killed >> killed_at;
    in >> failed_at;
    std::string text;
    std::getline(in, text);
    std::getline(in, text);
    CAPTURE(text);
    CHECK(killed_at > 0);
    CHECK(text != "no error");
    CHECK(failed_at - killed_at < bound.count());
  }
}

} // namespace hvactor::test
