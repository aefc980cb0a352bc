#include "collectives/engine/response_cache.hpp"

namespace hvactor::collectives {

std::optional<size_t> response_cache::find(const std::string& name) const {
  auto i = by_name_.find(name);
  if (i == by_name_.end())
    return std::nullopt;
  return i->second;
}

response_cache::placement response_cache::insert(const operation& op, uint64_t tick) {
  placement out;
  // The lowest free slot keeps the words few; none free and room left: a
  // new one; full: the least recently used (the lowest on a tie).
  size_t slot = slots_.size();
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!slots_[s].used) {
      slot = s;
      break;
    }
  if (slot == slots_.size()) {
    if (slots_.size() < capacity_) {
      slots_.emplace_back();
    } else {
      slot = 0;
      for (size_t s = 1; s < slots_.size(); ++s)
        if (slots_[s].last_used < slots_[slot].last_used)
          slot = s;
      out.evicted = slots_[slot].op.name;
      by_name_.erase(slots_[slot].op.name);
    }
  }
  slots_[slot] = {op, true, tick};
  by_name_[op.name] = slot;
  out.slot = slot;
  return out;
}

void response_cache::erase(size_t slot) {
  if (slot >= slots_.size() || !slots_[slot].used)
    return;
  by_name_.erase(slots_[slot].op.name);
  slots_[slot].used = false;
  slots_[slot].op = {};
}

} // namespace hvactor::collectives
