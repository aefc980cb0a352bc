#pragma once

// Internal: the response cache (HOROVOD_CACHE_CAPACITY; Horovod's
// response_cache.cc). Every rank holds an identical copy: entries are
// inserted, touched and erased only from what a negotiation round decided,
// which every rank learns alike. A tensor whose name and shape sit in slot s
// is then agreed on with one word of the round's allreduce (slot s) instead
// of its name. Plain code, tested without processes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/engine/operation.hpp"

namespace hvactor::collectives {

/// Negotiated operations by slot, evicting the least recently used.
/// Not thread-safe (the negotiator's driver thread owns it).
class response_cache {
public:
  /// `capacity` slots; 0 turns the cache off (nothing is ever inserted).
  explicit response_cache(size_t capacity) : capacity_(capacity) {
  }

  size_t capacity() const noexcept {
    return capacity_;
  }

  /// The slot holding `name`, if any.
  std::optional<size_t> find(const std::string& name) const;

  /// `slot` holds an operation.
  bool in_use(size_t slot) const {
    return slot < slots_.size() && slots_[slot].used;
  }
  /// The operation in `slot` (which must be in use).
  const operation& at(size_t slot) const {
    return slots_[slot].op;
  }

  /// Slots that a round's words cover: one past the highest slot ever used
  /// (the same on every rank).
  size_t words() const noexcept {
    return slots_.size();
  }

  /// Stores `op` (its name must not be cached) at round `tick`; returns
  /// its slot and, when the cache was full, the name evicted from it.
  struct placement {
    size_t slot = 0;
    std::optional<std::string> evicted;
  };
  placement insert(const operation& op, uint64_t tick);

  /// Marks `slot` used at round `tick` (LRU order).
  void touch(size_t slot, uint64_t tick) {
    slots_[slot].last_used = tick;
  }

  /// Frees `slot` (a rank submitted its name with another shape).
  void erase(size_t slot);

  /// Names cached now.
  size_t size() const noexcept {
    return by_name_.size();
  }

private:
  struct slot_entry {
    operation op;
    bool used = false;
    uint64_t last_used = 0;
  };
  size_t capacity_;
  std::vector<slot_entry> slots_;
  std::unordered_map<std::string, size_t> by_name_;
};

} // namespace hvactor::collectives
