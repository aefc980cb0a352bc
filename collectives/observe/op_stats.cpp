#include "collectives/observe/op_stats.hpp"

#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include <hvactor/event.hpp>

#include "base/internal/env_names.hpp"

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

std::vector<op_total> totals_locked(const registry& r) {
  std::vector<op_total> out;
  out.reserve(r.by_op.size());
  for (auto& [key, t] : r.by_op)
    out.push_back({key.first, key.second, t.count, t.bytes, t.seconds});
  return out;
}

std::string encode_locked(const registry& r) {
  return encode_op_totals(totals_locked(r));
}

// The number at the front of `text` (up to `stop`), consumed with `stop`;
// false when there is none.
template <class T>
bool take_number(std::string_view& text, char stop, T& value) {
  auto end = text.find(stop);
  auto field = text.substr(0, end);
  auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (ec != std::errc{} || ptr != field.data() + field.size())
    return false;
  text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  return true;
}

// One "kind/path=count,bytes,seconds" entry, or false.
bool decode_entry(std::string_view item, size_t max_name, op_total& t) {
  auto slash = item.find('/'), eq = item.find('=');
  if (slash == std::string_view::npos || eq == std::string_view::npos || eq < slash)
    return false;
  t.op = std::string{item.substr(0, std::min(slash, max_name))};
  t.path = std::string{item.substr(slash + 1, std::min(eq - slash - 1, max_name))};
  auto numbers = item.substr(eq + 1);
  return take_number(numbers, ',', t.count) && take_number(numbers, ',', t.bytes)
         && take_number(numbers, ';', t.seconds) && numbers.empty();
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
  log::event({{"event", op_stats_event}, {"ops", ops}});
}

std::vector<op_total> op_totals() {
  auto& r = stats();
  std::lock_guard<std::mutex> lk{r.mu};
  return totals_locked(r);
}

std::string encode_op_totals(const std::vector<op_total>& totals) {
  std::string out;
  for (auto& t : totals)
    out += fmt::format("{}/{}={},{},{:.6f};", t.op, t.path, t.count, t.bytes, t.seconds);
  return out;
}

std::vector<op_total> decode_op_totals(std::string_view ops, size_t max_entries,
                                       size_t max_name) {
  std::vector<op_total> out;
  while (!ops.empty() && out.size() < max_entries) {
    auto item = ops.substr(0, ops.find(';'));
    ops.remove_prefix(std::min(ops.size(), item.size() + 1));
    op_total t;
    if (decode_entry(item, max_name, t))
      out.push_back(std::move(t));
  }
  return out;
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
  log::event({{"event", op_stats_event}, {"ops", ops}});
}

} // namespace hvactor::collectives
