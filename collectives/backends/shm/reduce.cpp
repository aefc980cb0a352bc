#include "collectives/backends/shm/reduce.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

// Compiled with -O3 (collectives/CMakeLists.txt): the loops below are the
// vectorizer's; only fp16 uses intrinsics (F16C, chosen at run time).

namespace hvactor::collectives::shm {

namespace {

// Elements per block: the running result stays in L1 while every source
// streams through once.
constexpr size_t block_bytes = 8192;

template <class T, class F>
void reduce_typed(void* out, void* copy, const void* const* srcs, int n, size_t count, F f) {
  constexpr size_t block = block_bytes / sizeof(T);
  alignas(64) T acc[block];
  for (size_t b = 0; b < count; b += block) {
    size_t m = std::min(block, count - b);
    const T* s0 = static_cast<const T*>(srcs[0]) + b;
    if (n == 1) {
      std::memcpy(acc, s0, m * sizeof(T));
    } else {
      const T* s1 = static_cast<const T*>(srcs[1]) + b;
      for (size_t i = 0; i < m; ++i)
        acc[i] = f(s0[i], s1[i]);
      for (int k = 2; k < n; ++k) {
        const T* sk = static_cast<const T*>(srcs[k]) + b;
        for (size_t i = 0; i < m; ++i)
          acc[i] = f(acc[i], sk[i]);
      }
    }
    std::memcpy(static_cast<T*>(out) + b, acc, m * sizeof(T));
    if (copy)
      std::memcpy(static_cast<T*>(copy) + b, acc, m * sizeof(T));
  }
}

template <class T>
void reduce_op(void* out, void* copy, const void* const* srcs, int n, size_t count, hvd::op o) {
  switch (o) {
    case hvd::op::product:
      return reduce_typed<T>(out, copy, srcs, n, count, [](T a, T b) { return a * b; });
    case hvd::op::min:
      return reduce_typed<T>(out, copy, srcs, n, count, [](T a, T b) { return std::min(a, b); });
    case hvd::op::max:
      return reduce_typed<T>(out, copy, srcs, n, count, [](T a, T b) { return std::max(a, b); });
    default:
      return reduce_typed<T>(out, copy, srcs, n, count, [](T a, T b) { return a + b; });
  }
}

// fp16: each step is float arithmetic rounded back to half (nearest even),
// as gloo::float16's operators do.
float apply(hvd::op o, float a, float b) {
  switch (o) {
    case hvd::op::product:
      return a * b;
    case hvd::op::min:
      return std::min(a, b);
    case hvd::op::max:
      return std::max(a, b);
    default:
      return a + b;
  }
}

// H: hvd::half or hvd::bfloat16 (bfloat16 as well: float steps, rounded).
template <class H>
void reduce_16_portable(void* out, void* copy, const void* const* srcs, int n, size_t count,
                        hvd::op o) {
  auto* dst = static_cast<H*>(out);
  auto* dup = static_cast<H*>(copy);
  for (size_t i = 0; i < count; ++i) {
    H acc = static_cast<const H*>(srcs[0])[i];
    for (int k = 1; k < n; ++k)
      acc = H(apply(o, static_cast<float>(acc), static_cast<float>(static_cast<const H*>(srcs[k])[i])));
    dst[i] = acc;
    if (dup)
      dup[i] = acc;
  }
}

void reduce_half_portable(void* out, void* copy, const void* const* srcs, int n, size_t count,
                          hvd::op o) {
  reduce_16_portable<hvd::half>(out, copy, srcs, n, count, o);
}

template <int Op>
__attribute__((target("avx,f16c"), always_inline)) inline __m256 apply8(__m256 a, __m256 b) {
  if constexpr (Op == 1)
    return _mm256_mul_ps(a, b);
  else if constexpr (Op == 2)
    return _mm256_min_ps(b, a); // std::min(a, b) == (b < a ? b : a)
  else if constexpr (Op == 3)
    return _mm256_max_ps(b, a); // std::max(a, b) == (a < b ? b : a)
  else
    return _mm256_add_ps(a, b);
}

template <int Op>
__attribute__((target("avx,f16c"))) void reduce_half_f16c(void* out, void* copy,
                                                          const void* const* srcs, int n,
                                                          size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i acc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
      static_cast<const uint16_t*>(srcs[0]) + i));
    for (int k = 1; k < n; ++k) {
      __m256 next = _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(srcs[k]) + i)));
      acc = _mm256_cvtps_ph(apply8<Op>(_mm256_cvtph_ps(acc), next), _MM_FROUND_TO_NEAREST_INT);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(out) + i), acc);
    if (copy)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(copy) + i), acc);
  }
  if (i < count) {
    const void* rest[256];
    int m = std::min(n, 256);
    for (int k = 0; k < m; ++k)
      rest[k] = static_cast<const uint16_t*>(srcs[k]) + i;
    constexpr hvd::op ops[] = {hvd::op::sum, hvd::op::product, hvd::op::min, hvd::op::max};
    reduce_half_portable(static_cast<uint16_t*>(out) + i,
                         copy ? static_cast<uint16_t*>(copy) + i : nullptr, rest, m, count - i,
                         ops[Op]);
  }
}

void reduce_half(void* out, void* copy, const void* const* srcs, int n, size_t count, hvd::op o) {
  static const bool f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  if (!f16c || n > 256)
    return reduce_half_portable(out, copy, srcs, n, count, o);
  switch (o) {
    case hvd::op::product:
      return reduce_half_f16c<1>(out, copy, srcs, n, count);
    case hvd::op::min:
      return reduce_half_f16c<2>(out, copy, srcs, n, count);
    case hvd::op::max:
      return reduce_half_f16c<3>(out, copy, srcs, n, count);
    default:
      return reduce_half_f16c<0>(out, copy, srcs, n, count);
  }
}

} // namespace

void reduce(void* out, void* copy, const void* const* srcs, int n, size_t count, hvd::dtype t,
            hvd::op o) {
  if (count == 0 || n <= 0)
    return;
  switch (t) {
    case hvd::dtype::float16:
      return reduce_half(out, copy, srcs, n, count, o);
    case hvd::dtype::float32:
      return reduce_op<float>(out, copy, srcs, n, count, o);
    case hvd::dtype::float64:
      return reduce_op<double>(out, copy, srcs, n, count, o);
    case hvd::dtype::int32:
      return reduce_op<int32_t>(out, copy, srcs, n, count, o);
    case hvd::dtype::int64:
      return reduce_op<int64_t>(out, copy, srcs, n, count, o);
    case hvd::dtype::uint8:
      return reduce_op<uint8_t>(out, copy, srcs, n, count, o);
    case hvd::dtype::int8:
      return reduce_op<int8_t>(out, copy, srcs, n, count, o);
    case hvd::dtype::int16:
      return reduce_op<int16_t>(out, copy, srcs, n, count, o);
    case hvd::dtype::bfloat16:
      return reduce_16_portable<hvd::bfloat16>(out, copy, srcs, n, count, o);
    case hvd::dtype::boolean: // + and * of bools, stored back as bool: or, and
      return reduce_op<bool>(out, copy, srcs, n, count, o);
  }
}

} // namespace hvactor::collectives::shm
