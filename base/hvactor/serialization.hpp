#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/error.hpp>

#include "hvactor/errors.hpp"
#include "hvactor/float_bits.hpp"

namespace hvactor::detail {

/// Serializes values with CAF's binary format (anything CAF can inspect),
/// floating-point values as their bit patterns (float_bits.hpp: CAF's own
/// conversion hangs on an infinity), so that inf, NaN, -0.0 and subnormals
/// arrive exactly.
template <class... Ts>
std::vector<char> pack(Ts&... xs) {
  std::vector<char> buf;
  caf::binary_serializer bytes{nullptr, buf};
  float_bits_serializer sink{bytes};
  if (auto err = sink(xs...))
    throw error("cannot serialize call arguments or result: " + caf::to_string(err));
  return buf;
}

/// Reverses pack() into a tuple of `Ts...`.
template <class... Ts>
std::tuple<Ts...> unpack(const std::vector<char>& buf) {
  std::tuple<Ts...> result;
  if constexpr (sizeof...(Ts) > 0) {
    caf::binary_deserializer bytes{nullptr, buf};
    float_bits_deserializer source{bytes};
    auto err = std::apply([&](auto&... xs) { return source(xs...); }, result);
    if (err)
      throw error("cannot deserialize call arguments or result: " + caf::to_string(err));
  }
  return result;
}

} // namespace hvactor::detail
