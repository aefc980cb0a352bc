#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace hvactor::hvd {

/// Reduction of allreduce (Horovod's hvd.Sum, hvd.Average, hvd.Min, hvd.Max,
/// hvd.Product, hvd.Adasum). `average` is `sum` divided by size(); on
/// integer tensors the division truncates toward zero. `adasum`: Horovod's
/// Adasum (float16/32/64 host tensors, a power of 2 ranks; allreduce only).
enum class op { sum, average, min, max, product, adasum };

/// Horovod's prescale_factor and postscale_factor (allreduce and
/// reducescatter): each rank's input is multiplied by `prescale_factor`
/// before the reduction, the result by `postscale_factor` after it (after
/// op::average's division). Both must be finite and equal on every rank (a
/// difference fails the call on every rank); integer results truncate
/// toward zero (x * factor, as Horovod's CPU path); bool tensors take none.
struct scale_factors {
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
  bool identity() const {
    return prescale_factor == 1.0 && postscale_factor == 1.0;
  }
};

/// IEEE 754 binary16, stored as its bits (the layout of gloo::float16 and
/// CUDA's __half). Reductions run on it directly.
struct half {
  uint16_t bits = 0;
  half() = default;
  /// Round-to-nearest-even conversion from float.
  explicit half(float value);
  /// Exact conversion to float.
  explicit operator float() const;
  friend bool operator==(half a, half b) {
    return a.bits == b.bits;
  }
};

/// bfloat16 (the upper half of an IEEE 754 binary32), stored as its bits
/// (the layout of CUDA's __nv_bfloat16 and LibTorch's c10::BFloat16).
/// Reductions run in float, rounded back to nearest even.
struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  /// Round-to-nearest-even conversion from float (NaN stays NaN).
  explicit bfloat16(float value);
  /// Exact conversion to float.
  explicit operator float() const;
  friend bool operator==(bfloat16 a, bfloat16 b) {
    return a.bits == b.bits;
  }
};

/// Element types the collectives carry.
/// `boolean` is bool (one byte, 0 or 1): sum and max reduce it as "or",
/// product and min as "and"; its average is refused.
enum class dtype { float16, float32, float64, int32, int64, uint8, int8, int16, bfloat16, boolean };

/// The last dtype: values past it on the wire are malformed.
inline constexpr dtype last_dtype = dtype::boolean;

template <class T>
inline constexpr bool is_element_v =
  std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>
  || std::is_same_v<T, int64_t> || std::is_same_v<T, half> || std::is_same_v<T, uint8_t>
  || std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> || std::is_same_v<T, bfloat16>
  || std::is_same_v<T, bool>;

/// A type hvd collectives accept: float, double, int32_t, int64_t, half,
/// uint8_t, int8_t, int16_t, bfloat16, bool.
template <class T>
concept element = is_element_v<std::remove_const_t<T>>;

template <element T>
constexpr dtype dtype_of() {
  using U = std::remove_const_t<T>;
  if constexpr (std::is_same_v<U, float>)
    return dtype::float32;
  else if constexpr (std::is_same_v<U, double>)
    return dtype::float64;
  else if constexpr (std::is_same_v<U, int32_t>)
    return dtype::int32;
  else if constexpr (std::is_same_v<U, int64_t>)
    return dtype::int64;
  else if constexpr (std::is_same_v<U, uint8_t>)
    return dtype::uint8;
  else if constexpr (std::is_same_v<U, int8_t>)
    return dtype::int8;
  else if constexpr (std::is_same_v<U, int16_t>)
    return dtype::int16;
  else if constexpr (std::is_same_v<U, bfloat16>)
    return dtype::bfloat16;
  else if constexpr (std::is_same_v<U, bool>)
    return dtype::boolean;
  else
    return dtype::float16;
}

/// Bytes per element.
size_t size_of(dtype t);

/// "float32", "int64", ...
const char* to_string(dtype t);

/// "sum", "average", ...
const char* to_string(op o);

} // namespace hvactor::hvd
