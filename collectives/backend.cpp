#include "hvactor/collectives/backend.hpp"

#include <cstring>

#include "engine.hpp"

namespace hvactor::collectives {

void backend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, src, bytes);
}

void backend::zero(void* dst, size_t bytes) {
  if (bytes > 0)
    std::memset(dst, 0, bytes);
}

void* backend::scratch(size_t bytes) {
  if (scratch_.size() < bytes)
    scratch_.resize(bytes);
  return scratch_.data();
}

void backend::scale(void* data, size_t count, hvd::dtype t, int divisor) {
  hvd::detail::scale_average(data, count, t, divisor);
}

} // namespace hvactor::collectives
