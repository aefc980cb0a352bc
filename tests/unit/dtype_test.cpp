// hvd's element types: sizes and names of every dtype, bfloat16's
// conversions (round to nearest even, as CUDA's __float2bfloat16 and
// LibTorch's c10::BFloat16 do), and the shared-memory reduction of the
// small types.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "collectives/backends/shm/reduce.hpp"
#include <hvactor/hvd.hpp>

namespace hvd = hvactor::hvd;

TEST_SUITE("dtype") {

TEST_CASE("every dtype has its size, its name, and dtype_of<T> for its C++ type") {
  CHECK(hvd::size_of(hvd::dtype::uint8) == 1);
  CHECK(hvd::size_of(hvd::dtype::int8) == 1);
  CHECK(hvd::size_of(hvd::dtype::int16) == 2);
  CHECK(hvd::size_of(hvd::dtype::bfloat16) == 2);
  CHECK(hvd::size_of(hvd::dtype::float16) == 2);
  CHECK(std::string{hvd::to_string(hvd::dtype::bfloat16)} == "bfloat16");
  CHECK(std::string{hvd::to_string(hvd::dtype::uint8)} == "uint8");
  CHECK(hvd::dtype_of<uint8_t>() == hvd::dtype::uint8);
  CHECK(hvd::dtype_of<const int8_t>() == hvd::dtype::int8);
  CHECK(hvd::dtype_of<int16_t>() == hvd::dtype::int16);
  CHECK(hvd::dtype_of<hvd::bfloat16>() == hvd::dtype::bfloat16);
  CHECK(hvd::dtype_of<bool>() == hvd::dtype::boolean);
  CHECK(hvd::size_of(hvd::dtype::boolean) == 1);
  CHECK(std::string{hvd::to_string(hvd::dtype::boolean)} == "bool");
  CHECK(hvd::last_dtype == hvd::dtype::boolean);
}

TEST_CASE("bfloat16 rounds to nearest even and keeps infinities and NaN") {
  CHECK(hvd::bfloat16(1.0f).bits == 0x3f80);
  CHECK(hvd::bfloat16(-2.0f).bits == 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1.
  CHECK(hvd::bfloat16(1.0f + std::ldexp(1.0f, -8)).bits == 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  CHECK(hvd::bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits == 0x3f82);
  // Just above halfway rounds up.
  CHECK(hvd::bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)).bits == 0x3f81);
  CHECK(hvd::bfloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(std::isnan(static_cast<float>(hvd::bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // The largest float rounds to infinity, as in CUDA.
  CHECK(hvd::bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);
  // Conversion back is exact.
  for (float f : {0.0f, 1.5f, -3.25f, 65536.0f, 1e-30f})
    CHECK(static_cast<float>(hvd::bfloat16(f)) == doctest::Approx(f).epsilon(1.0 / 128));
  CHECK(static_cast<float>(hvd::bfloat16(1.5f)) == 1.5f);
}

TEST_CASE("shared-memory reduction of uint8 wraps, of int8/int16 keeps signs, of bfloat16 rounds, "
          "of bool is or / and") {
  std::vector<uint8_t> a{200, 1, 7}, b{100, 2, 3}, out(3);
  const void* srcs[] = {a.data(), b.data()};
  hvactor::collectives::shm::reduce(out.data(), nullptr, srcs, 2, 3, hvd::dtype::uint8,
                                    hvd::op::sum);
  CHECK(out == std::vector<uint8_t>{44, 3, 10});
  hvactor::collectives::shm::reduce(out.data(), nullptr, srcs, 2, 3, hvd::dtype::uint8,
                                    hvd::op::min);
  CHECK(out == std::vector<uint8_t>{100, 1, 3});

  std::vector<int16_t> c{-300, 5}, d{100, -9}, out16(2);
  const void* s16[] = {c.data(), d.data()};
  hvactor::collectives::shm::reduce(out16.data(), nullptr, s16, 2, 2, hvd::dtype::int16,
                                    hvd::op::sum);
  CHECK(out16 == std::vector<int16_t>{-200, -4});

  std::vector<hvd::bfloat16> e{hvd::bfloat16(1.0f), hvd::bfloat16(256.0f)},
    f{hvd::bfloat16(0.5f), hvd::bfloat16(1.0f)}, outb(2);
  const void* sb[] = {e.data(), f.data()};
  hvactor::collectives::shm::reduce(outb.data(), nullptr, sb, 2, 2, hvd::dtype::bfloat16,
                                    hvd::op::sum);
  CHECK(static_cast<float>(outb[0]) == 1.5f);
  CHECK(static_cast<float>(outb[1]) == 256.0f); // 257 rounds to even: 256

  bool p[3] = {true, false, false}, q[3] = {false, false, true}, outbool[3];
  const void* sbool[] = {p, q};
  hvactor::collectives::shm::reduce(outbool, nullptr, sbool, 2, 3, hvd::dtype::boolean,
                                    hvd::op::sum);
  CHECK((outbool[0] && !outbool[1] && outbool[2]));
  hvactor::collectives::shm::reduce(outbool, nullptr, sbool, 2, 3, hvd::dtype::boolean,
                                    hvd::op::product);
  CHECK((!outbool[0] && !outbool[1] && !outbool[2]));
}

} // TEST_SUITE
