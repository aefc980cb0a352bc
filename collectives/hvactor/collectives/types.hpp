#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace hvactor::hvd {

/// Reduction of allreduce (Horovod's hvd.Sum, hvd.Average, hvd.Min, hvd.Max,
/// hvd.Product). `average` is `sum` divided by size(); on integer tensors
/// the division truncates toward zero.
enum class op { sum, average, min, max, product };

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

/// Element types the collectives carry.
enum class dtype { float16, float32, float64, int32, int64 };

template <class T>
inline constexpr bool is_element_v =
  std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t>
  || std::is_same_v<T, int64_t> || std::is_same_v<T, half>;

/// A type hvd collectives accept: float, double, int32_t, int64_t, half.
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
