#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "collectives/backends/backend.hpp"

namespace hvactor::collectives::shm {

/// Several buffers (the tensors of a fused batch) seen as one byte range:
/// copies into and out of any part of it, and a direct pointer where a
/// range lies inside one buffer. Reused across calls (no allocation once
/// it has seen the largest batch).
class parts_view {
public:
  void assign(std::span<const buffer_part> parts, size_t element_bytes);

  size_t bytes() const noexcept {
    return starts_.empty() ? 0 : starts_.back();
  }

  /// [from, from + len) of the view into `dst`.
  void gather(size_t from, size_t len, std::byte* dst) const;

  /// `len` bytes from `src` into [from, from + len) of the view.
  void scatter(const std::byte* src, size_t from, size_t len) const;

  /// The address of [from, from + len) when it lies in one buffer, else
  /// nullptr.
  std::byte* contiguous(size_t from, size_t len) const;

  /// The offset of byte `at` (< bytes()) from a 64-byte cache line.
  size_t line_offset(size_t at) const;

private:
  /// Index of the buffer holding byte `at` (at < bytes()).
  size_t find(size_t at) const;

  std::vector<std::byte*> bases_;
  /// Byte offset of each buffer in the view, then the total.
  std::vector<size_t> starts_;
};

} // namespace hvactor::collectives::shm
