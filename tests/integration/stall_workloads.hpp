#pragma once

// A rank busy outside hvd calls while the others wait in a collective (the
// stall inspector's case), for stall_test and hier_driver's stall mode.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "test_support.hpp"

namespace hvactor::test {

/// The stalled collective: `kind` "unnamed" (a synchronous allreduce,
/// paired by call order) or "named" (an async allreduce named "grad").
inline void stalled_reduce(const std::string& kind) {
  namespace hvd = hvactor::hvd;
  std::vector<float> x(8, 1.0f);
  if (kind == "named") {
    auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "grad");
    hvd::synchronize(h);
  } else {
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
  }
}

/// Job: rank 0 is busy while every other rank waits. In a set (`in_set`,
/// 3 ranks): the set {1, 2}, rank 1 busy (the set's rank 0), rank 2
/// waiting. All run `kind` once together first (so a name is cached).
/// Each waiting rank returns "<ms its call took>|<error>" and writes
/// <dir>/failed; the busy rank waits for that file, then calls the same
/// collective and returns its error; a rank outside the set returns
/// "outside".
inline std::string busy_peer(std::string dir, std::string kind, bool in_set) {
  namespace hvd = hvactor::hvd;
  using namespace std::chrono_literals;
  hvd::process_set pair({1, 2});
  std::vector<hvd::process_set*> sets;
  if (in_set)
    sets.push_back(&pair);
  hvd::init(sets);
  struct closer {
    ~closer() {
      hvd::shutdown();
    }
  } close;
  int me = hvd::rank(), busy = in_set ? 1 : 0;
  auto failed = std::filesystem::path(dir) / "failed";
  auto await_failure = [&] { wait_until([&] { return std::filesystem::exists(failed); }, 20s); };
  if (in_set && me == 0) {
    await_failure();
    return "outside";
  }
  std::optional<hvd::process_set_scope> scope;
  if (in_set)
    scope.emplace(pair);
  stalled_reduce(kind);
  if (me == busy) {
    await_failure();
    try {
      stalled_reduce(kind);
    } catch (const hvactor::collective_error& e) {
      return e.what();
    }
    return "no error";
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string outcome = "no error";
  try {
    stalled_reduce(kind);
  } catch (const hvactor::collective_error& e) {
    outcome = e.what();
  }
  auto ms =
    std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::ofstream{failed} << "done";
  return std::to_string(ms.count()) + "|" + outcome;
}

} // namespace hvactor::test
