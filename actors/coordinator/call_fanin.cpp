#include "actors/coordinator/call_fanin.hpp"

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor {

void call_fanin::open(uint64_t id, size_t slots) {
  if (slots == 0)
    throw std::invalid_argument("call_fanin: a call needs at least one slot");
  auto [it, fresh] = calls_.try_emplace(id);
  if (!fresh)
    throw std::logic_error("call_fanin: call " + std::to_string(id) + " is already open");
  it->second.slots.resize(slots);
  it->second.remaining = slots;
}

call_fanin::next call_fanin::on_result(uint64_t id, size_t slot, std::vector<char> payload) {
  auto i = calls_.find(id);
  if (i == calls_.end() || i->second.failure)
    return next::ignore;
  auto& c = i->second;
  if (slot >= c.slots.size() || c.slots[slot])
    return next::ignore; // not a slot of this call, or a duplicate answer
  c.slots[slot] = std::move(payload);
  return --c.remaining == 0 ? next::answer : next::wait;
}

call_fanin::next call_fanin::on_error(uint64_t id, caf::error err) {
  auto i = calls_.find(id);
  if (i == calls_.end() || i->second.failure)
    return next::ignore;
  i->second.failure = std::move(err);
  return next::hold_error;
}

std::vector<std::vector<char>> call_fanin::take_results(uint64_t id) {
  auto i = calls_.find(id);
  if (i == calls_.end() || i->second.remaining != 0 || i->second.failure)
    throw std::logic_error("call_fanin: call " + std::to_string(id) + " is not complete");
  std::vector<std::vector<char>> out;
  out.reserve(i->second.slots.size());
  for (auto& s : i->second.slots)
    out.push_back(std::move(*s));
  calls_.erase(i);
  return out;
}

caf::error call_fanin::take_error(uint64_t id) {
  auto i = calls_.find(id);
  if (i == calls_.end() || !i->second.failure)
    return {};
  auto err = std::move(i->second.failure);
  calls_.erase(i);
  return err;
}

std::vector<size_t> call_fanin::open_slots(uint64_t id) const {
  std::vector<size_t> out;
  if (auto i = calls_.find(id); i != calls_.end())
    for (size_t s = 0; s < i->second.slots.size(); ++s)
      if (!i->second.slots[s])
        out.push_back(s);
  return out;
}

std::vector<uint64_t> call_fanin::close_all() {
  std::vector<uint64_t> ids;
  ids.reserve(calls_.size());
  for (auto& [id, c] : calls_)
    ids.push_back(id);
  calls_.clear();
  return ids;
}

caf::error call_raised(const std::string& who, const std::string& what, int rank) {
  return make_error(error_kind::worker_error,
                    fmt::format("remote call on {} raised: {}", who, what), rank);
}

caf::error call_failed(const std::string& who, const caf::error& why, int rank) {
  return make_error(error_kind::worker_error,
                    fmt::format("remote call on {} failed: {}", who, describe(why)), rank);
}

caf::error call_timed_out(const std::string& who, std::chrono::milliseconds limit, int rank) {
  return make_error(error_kind::worker_error,
                    fmt::format("remote call on {} did not answer within call_timeout ({} ms)",
                                who, limit.count()),
                    rank);
}

} // namespace hvactor
