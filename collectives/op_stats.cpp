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
  // The entry counted last (map nodes stay put): a loop of one kind of
  // call finds it without building a key.
  op_kind last_kind{};
  std::string last_path;
  totals* last = nullptr;
};

bool under_hvactor() {
  static const bool set = std::getenv(env::rendezvous_scope) != nullptr;
  return set;
}

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
              std::chrono::steady_clock::time_point began,
              std::chrono::steady_clock::time_point ended) {
  auto& r = stats();
  std::string ops;
  {
    std::lock_guard<std::mutex> lk{r.mu};
    if (r.last == nullptr || r.last_kind != kind || r.last_path != path) {
      r.last = &r.by_op[{to_string(kind), std::string{path}}];
      r.last_kind = kind;
      r.last_path = path;
    }
    ++r.last->count;
    r.last->bytes += bytes;
    r.last->seconds += std::chrono::duration<double>(ended - began).count();
    r.changed = true;
    if (!under_hvactor() || ended - r.last_report < op_stats_interval)
      return;
    r.changed = false;
    r.last_report = ended;
    ops = encode_locked(r);
  }
  log::event({{"event", "hvactor.collectives"}, {"ops", ops}});
}

std::string encode_op_stats() {
  auto& r = stats();
  std::lock_guard<std::mutex> lk{r.mu};
  return encode_locked(r);
}

void report_op_stats(std::chrono::steady_clock::duration interval) {
  if (!under_hvactor())
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
