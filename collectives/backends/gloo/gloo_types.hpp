#pragma once

#include <algorithm>
#include <type_traits>

#include <gloo/math.h>
#include <gloo/types.h>

#include "collectives/backends/shm/reduce.hpp"
#include "hvactor/hvd.hpp"

// Gloo's element type and reduction for each hvd::dtype and op.
namespace hvactor::collectives::gloo_types {

using reduce_fn = void (*)(void*, const void*, const void*, size_t);

// Calls f.template operator()<T>() with T the Gloo element type of `t`.
template <class F>
decltype(auto) with_type(hvd::dtype t, F&& f) {
  switch (t) {
    case hvd::dtype::float16:
      return f.template operator()<::gloo::float16>();
    case hvd::dtype::float32:
      return f.template operator()<float>();
    case hvd::dtype::float64:
      return f.template operator()<double>();
    case hvd::dtype::int32:
      return f.template operator()<int32_t>();
    case hvd::dtype::uint8:
      return f.template operator()<uint8_t>();
    case hvd::dtype::int8:
      return f.template operator()<int8_t>();
    case hvd::dtype::int16:
      return f.template operator()<int16_t>();
    case hvd::dtype::bfloat16:
      return f.template operator()<hvd::bfloat16>();
    case hvd::dtype::boolean:
      return f.template operator()<bool>();
    case hvd::dtype::int64:
      break;
  }
  return f.template operator()<int64_t>();
}

// bfloat16, which Gloo has no type for: each step in float, rounded back.
template <hvd::op O>
void bf16_reduce(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<hvd::bfloat16*>(c);
  auto* x = static_cast<const hvd::bfloat16*>(a);
  auto* y = static_cast<const hvd::bfloat16*>(b);
  for (size_t i = 0; i < n; ++i) {
    float p = static_cast<float>(x[i]), q = static_cast<float>(y[i]);
    float r = O == hvd::op::min       ? std::min(p, q)
              : O == hvd::op::max     ? std::max(p, q)
              : O == hvd::op::product ? p * q
                                      : p + q;
    out[i] = hvd::bfloat16(r);
  }
}

// float16: Gloo's own operators convert one element at a time (21 ns per
// element on the 2-core VM, 25x float32's sum: fp16 compression of
// ResNet-50's gradients then cost more CPU per step than it saved on a
// 1 Gbit/s link). The shared-memory path's reduction does 8 at a time with
// F16C where the CPU has it, with the same rounding (float steps, nearest
// even). `c` may be `a`.
template <hvd::op O>
void f16_reduce(void* c, const void* a, const void* b, size_t n) {
  const void* srcs[2] = {a, b};
  shm::reduce(c, nullptr, srcs, 2, n, hvd::dtype::float16, O);
}

template <class T>
reduce_fn reduction(hvd::op o) {
  if constexpr (std::is_same_v<T, ::gloo::float16>) {
    switch (o) {
      case hvd::op::min:
        return &f16_reduce<hvd::op::min>;
      case hvd::op::max:
        return &f16_reduce<hvd::op::max>;
      case hvd::op::product:
        return &f16_reduce<hvd::op::product>;
      default:
        return &f16_reduce<hvd::op::sum>;
    }
  } else if constexpr (std::is_same_v<T, hvd::bfloat16>) {
    switch (o) {
      case hvd::op::min:
        return &bf16_reduce<hvd::op::min>;
      case hvd::op::max:
        return &bf16_reduce<hvd::op::max>;
      case hvd::op::product:
        return &bf16_reduce<hvd::op::product>;
      default:
        return &bf16_reduce<hvd::op::sum>;
    }
  } else {
    switch (o) {
      case hvd::op::min:
        return &::gloo::min<T>;
      case hvd::op::max:
        return &::gloo::max<T>;
      case hvd::op::product:
        return &::gloo::product<T>;
      default:
        return &::gloo::sum<T>;
    }
  }
}

} // namespace hvactor::collectives::gloo_types
