#include "collectives/backends/backend.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "collectives/backends/adasum.hpp"

namespace hvactor::collectives {

namespace {

template <class T>
void divide(void* data, size_t count, int divisor) {
  auto* x = static_cast<T*>(data);
  if constexpr (std::is_floating_point_v<T>) {
    T factor = T(1) / static_cast<T>(divisor);
    for (size_t i = 0; i < count; ++i)
      x[i] *= factor;
  } else {
    // Integers truncate toward zero, as the device kernel does.
    // In int64: a divisor beyond a small type's range (300 ranks of
    // uint8) must not wrap.
    for (size_t i = 0; i < count; ++i)
      x[i] = static_cast<T>(static_cast<int64_t>(x[i]) / divisor);
  }
}

// Horovod's CPU scaling (ScaleBufferCPUImpl): float32 and the 16-bit
// types multiply by (float)factor in float, so that the bits match
// Horovod's (75.0f x 0.1915194503788923 is 0x41e5d2c7 there, 0x41e5d2c6
// through double); float64 and integers multiply in double.
template <class T>
void times(void* data, size_t count, double factor) {
  auto* x = static_cast<T*>(data);
  if constexpr (std::is_same_v<T, hvd::half> || std::is_same_v<T, hvd::bfloat16>) {
    auto f = static_cast<float>(factor);
    for (size_t i = 0; i < count; ++i)
      x[i] = T(static_cast<float>(x[i]) * f);
  } else if constexpr (std::is_same_v<T, float>) {
    auto f = static_cast<float>(factor);
    for (size_t i = 0; i < count; ++i)
      x[i] *= f;
  } else {
    for (size_t i = 0; i < count; ++i)
      x[i] = static_cast<T>(static_cast<double>(x[i]) * factor);
  }
}

} // namespace

void backend::reducescatter(void* data, size_t count, std::span<const size_t> counts, int rank,
                            hvd::dtype t, hvd::op o, void* out) {
  size_t offset = 0;
  for (int r = 0; r < rank; ++r)
    offset += counts[static_cast<size_t>(r)];
  allreduce(data, count, t, o);
  auto esz = hvd::size_of(t);
  copy(out, static_cast<char*>(data) + offset * esz, counts[static_cast<size_t>(rank)] * esz);
}

void backend::multiply(void* data, size_t count, hvd::dtype t, double factor) {
  if (factor == 1.0)
    return;
  switch (t) {
    case hvd::dtype::float16:
      return times<hvd::half>(data, count, factor);
    case hvd::dtype::bfloat16:
      return times<hvd::bfloat16>(data, count, factor);
    case hvd::dtype::float32:
      return times<float>(data, count, factor);
    case hvd::dtype::float64:
      return times<double>(data, count, factor);
    case hvd::dtype::int32:
      return times<int32_t>(data, count, factor);
    case hvd::dtype::int64:
      return times<int64_t>(data, count, factor);
    case hvd::dtype::uint8:
      return times<uint8_t>(data, count, factor);
    case hvd::dtype::int8:
      return times<int8_t>(data, count, factor);
    case hvd::dtype::int16:
      return times<int16_t>(data, count, factor);
    case hvd::dtype::boolean: // refused by the hvd calls
      return;
  }
}

std::shared_ptr<void> backend::zeros(size_t bytes) {
  return std::shared_ptr<char[]>(new char[std::max<size_t>(bytes, 1)]());
}

void backend::adasum(void* data, size_t count, hvd::dtype t, int rank, int ranks) {
  adasum_allreduce(*this, data, count, t, rank, ranks);
}

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
  if (divisor <= 1)
    return;
  switch (t) {
    case hvd::dtype::float16: {
      auto* x = static_cast<hvd::half*>(data);
      for (size_t i = 0; i < count; ++i)
        x[i] = hvd::half(static_cast<float>(x[i]) / static_cast<float>(divisor));
      return;
    }
    case hvd::dtype::float32:
      return divide<float>(data, count, divisor);
    case hvd::dtype::float64:
      return divide<double>(data, count, divisor);
    case hvd::dtype::int32:
      return divide<int32_t>(data, count, divisor);
    case hvd::dtype::int64:
      return divide<int64_t>(data, count, divisor);
    case hvd::dtype::uint8:
      return divide<uint8_t>(data, count, divisor);
    case hvd::dtype::int8:
      return divide<int8_t>(data, count, divisor);
    case hvd::dtype::int16:
      return divide<int16_t>(data, count, divisor);
    case hvd::dtype::boolean: // no average of bools (refused by hvd::allreduce)
      return;
    case hvd::dtype::bfloat16: {
      auto* x = static_cast<hvd::bfloat16*>(data);
      for (size_t i = 0; i < count; ++i)
        x[i] = hvd::bfloat16(static_cast<float>(x[i]) / static_cast<float>(divisor));
      return;
    }
  }
}

} // namespace hvactor::collectives
