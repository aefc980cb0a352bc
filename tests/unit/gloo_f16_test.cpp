// Gloo's float16 reduction is hvactor's own (gloo_types.hpp: F16C, 8 at a
// time): bit for bit each step in float rounded to the nearest half, for
// every op, in place as Gloo calls it, over counts that leave a tail of
// fewer than 8. The reference is Gloo's conversion functions, not its
// float16 operators: Debian's Gloo (no AVX build) left 1 product in 65541
// as its first operand (0xdad8 x 0xdbff gave 0xdad8, not 0x7ad7).

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "collectives/backends/gloo/gloo_types.hpp"

namespace gt = hvactor::collectives::gloo_types;

namespace {

std::vector<::gloo::float16> halves(size_t n, uint64_t seed) {
  std::vector<::gloo::float16> out(n);
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    double v = (static_cast<double>(s >> 11) / 9007199254740992.0 - 0.5) * 4096.0;
    out[i] = ::gloo::cpu_float2half_rn(static_cast<float>(i % 97 == 0 ? v * 1e-7 : v));
  }
  // Both ends of the range, signed zeros and infinities.
  const float edges[] = {65504.0f, -65504.0f, 6.0e-8f, -0.0f, 0.0f,
                         std::numeric_limits<float>::infinity(), -1.0f, 1.0e5f};
  for (size_t i = 0; i < std::size(edges) && i < n; ++i)
    out[(i * 131) % n] = ::gloo::cpu_float2half_rn(edges[i]);
  return out;
}

std::vector<uint16_t> bits(const std::vector<::gloo::float16>& v) {
  std::vector<uint16_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 2);
  return out;
}

} // namespace

TEST_CASE("Gloo's float16 reduction gives float steps rounded to the nearest half bit for bit, in place, for sum, "
          "product, min and max, with tails of fewer than 8 elements") {
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{1003}, size_t{65536 + 5}})
    for (auto o : {hvactor::hvd::op::sum, hvactor::hvd::op::product, hvactor::hvd::op::min,
                   hvactor::hvd::op::max}) {
      CAPTURE(n);
      CAPTURE(static_cast<int>(o));
      auto a = halves(n, 1), b = halves(n, 2);
      std::vector<::gloo::float16> expected(n);
      for (size_t i = 0; i < n; ++i) {
        float p = ::gloo::cpu_half2float(a[i]), q = ::gloo::cpu_half2float(b[i]);
        float r = o == hvactor::hvd::op::product ? p * q
                  : o == hvactor::hvd::op::min   ? std::min(p, q)
                  : o == hvactor::hvd::op::max   ? std::max(p, q)
                                                 : p + q;
        expected[i] = ::gloo::cpu_float2half_rn(r);
      }
      gt::reduction<::gloo::float16>(o)(a.data(), a.data(), b.data(), n);
      CHECK(bits(a) == bits(expected));
    }
}
