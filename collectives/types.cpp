#include "hvactor/collectives/types.hpp"

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

size_t size_of(dtype t) {
  switch (t) {
    case dtype::float16:
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
  }
  return "?";
}

} // namespace hvactor::hvd
