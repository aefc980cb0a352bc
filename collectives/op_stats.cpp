#include "collectives/internal/op_stats.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include <hvactor/event.hpp>

#include "base/internal/knobs.hpp"

namespace hvactor::collectives {

namespace {

struct totals {
  uint64_t count = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

struct registry {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, totals> by_op;
  bool changed = false;
  std::chrono::steady_clock::time_point last_report{};
};

registry& stats() {
  static registry r;
  return r;
}

std::string encode_locked(const registry& r) {
  std::string out;
  for (auto& [key, t] : r.by_op)
    out += fmt::format("{}/{}={},{},{:.6f};", key.first, key.second, t.count, t.bytes, t.seconds);
  return out;
}

} // namespace

void count_op(op_kind kind, std::string_view path, uint64_t bytes,
              std::chrono::steady_clock::duration took) {
  auto& r = stats();
  {
    std::lock_guard<std::mutex> lk{r.mu};
    auto& t = r.by_op[{to_string(kind), std::string{path}}];
    ++t.count;
    t.bytes += bytes;
    t.seconds += std::chrono::duration<double>(took).count();
    r.changed = true;
  }
  report_op_stats();
}

std::string encode_op_stats() {
  auto& r = stats();
  std::lock_guard<std::mutex> lk{r.mu};
  return encode_locked(r);
}

void report_op_stats(std::chrono::steady_clock::duration interval) {
  static const bool under_hvactor = std::getenv(env::rendezvous_scope) != nullptr;
  if (!under_hvactor)
    return;
  auto& r = stats();
  std::string ops;
  {
    std::lock_guard<std::mutex> lk{r.mu};
    auto now = std::chrono::steady_clock::now();
    if (!r.changed || now - r.last_report < interval)
      return;
    r.changed = false;
    r.last_report = now;
    ops = encode_locked(r);
  }
  log::event({{"event", "hvactor.collectives"}, {"ops", ops}});
}

} // namespace hvactor::collectives
