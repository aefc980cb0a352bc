#include "hvactor/hvd_types.hpp"

#include <gloo/types.h>

#include <cstring>

namespace hvactor::hvd {

static_assert(sizeof(half) == sizeof(gloo::float16), "half must have gloo::float16's layout");

half::half(float value) {
  auto h = gloo::cpu_float2half_rn(value);
  std::memcpy(&bits, &h, sizeof(bits));
}

half::operator float() const {
  gloo::float16 h;
  std::memcpy(&h, &bits, sizeof(bits));
  return gloo::cpu_half2float(h);
}

bfloat16::bfloat16(float value) {
  uint32_t u = 0;
  std::memcpy(&u, &value, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) { // NaN: keep it quiet and a NaN
    bits = static_cast<uint16_t>((u >> 16) | 0x40);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even
  bits = static_cast<uint16_t>(u >> 16);
}

bfloat16::operator float() const {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

size_t size_of(dtype t) {
  switch (t) {
    case dtype::uint8:
    case dtype::int8:
    case dtype::boolean:
      return 1;
    case dtype::float16:
    case dtype::int16:
    case dtype::bfloat16:
      return 2;
    case dtype::float32:
    case dtype::int32:
      return 4;
    case dtype::float64:
    case dtype::int64:
      return 8;
  }
  return 1;
}

const char* to_string(dtype t) {
  switch (t) {
    case dtype::float16:
      return "float16";
    case dtype::float32:
      return "float32";
    case dtype::float64:
      return "float64";
    case dtype::int32:
      return "int32";
    case dtype::int64:
      return "int64";
    case dtype::uint8:
      return "uint8";
    case dtype::int8:
      return "int8";
    case dtype::int16:
      return "int16";
    case dtype::bfloat16:
      return "bfloat16";
    case dtype::boolean:
      return "bool";
  }
  return "?";
}

const char* to_string(op o) {
  switch (o) {
    case op::sum:
      return "sum";
    case op::average:
      return "average";
    case op::min:
      return "min";
    case op::max:
      return "max";
    case op::product:
      return "product";
    case op::adasum:
      return "adasum";
  }
  return "?";
}

} // namespace hvactor::hvd
