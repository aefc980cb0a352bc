#include "collectives/backends/shm/parts_view.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace hvactor::collectives::shm {

void parts_view::assign(std::span<const buffer_part> parts, size_t element_bytes) {
  bases_.clear();
  starts_.clear();
  size_t at = 0;
  for (auto& p : parts) {
    if (p.count == 0)
      continue;
    bases_.push_back(static_cast<std::byte*>(p.data));
    starts_.push_back(at);
    at += p.count * element_bytes;
  }
  starts_.push_back(at);
}

size_t parts_view::find(size_t at) const {
  auto i = std::upper_bound(starts_.begin(), starts_.end() - 1, at);
  return static_cast<size_t>(i - starts_.begin()) - 1;
}

void parts_view::gather(size_t from, size_t len, std::byte* dst) const {
  for (size_t i = len ? find(from) : 0; len > 0; ++i) {
    size_t skip = from - starts_[i];
    size_t n = std::min(len, starts_[i + 1] - from);
    std::memcpy(dst, bases_[i] + skip, n);
    dst += n;
    from += n;
    len -= n;
  }
}

void parts_view::scatter(const std::byte* src, size_t from, size_t len) const {
  for (size_t i = len ? find(from) : 0; len > 0; ++i) {
    size_t skip = from - starts_[i];
    size_t n = std::min(len, starts_[i + 1] - from);
    std::memcpy(bases_[i] + skip, src, n);
    src += n;
    from += n;
    len -= n;
  }
}

std::byte* parts_view::contiguous(size_t from, size_t len) const {
  if (len == 0 || from + len > bytes())
    return nullptr;
  size_t i = find(from);
  return from + len <= starts_[i + 1] ? bases_[i] + (from - starts_[i]) : nullptr;
}

size_t parts_view::line_offset(size_t at) const {
  size_t i = find(at);
  return reinterpret_cast<uintptr_t>(bases_[i] + (at - starts_[i])) % 64;
}

} // namespace hvactor::collectives::shm
