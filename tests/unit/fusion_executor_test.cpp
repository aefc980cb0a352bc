// The engine's allreduce recipe without ranks: reduce_in_place and a fused
// group on the local backend (whose allreduce leaves the data as it is), so
// what changes is exactly the packing, the copy back and the op::average
// division by the number of ranks.

#include <bit>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/backend.hpp"

#include "collectives/engine/fusion_executor.hpp"

namespace co = hvactor::collectives;
namespace hvd = hvactor::hvd;

namespace {

co::operation allreduce(size_t count, hvd::dtype t, hvd::op o) {
  co::operation op;
  op.count = count;
  op.type = t;
  op.reduction = o;
  return op;
}

} // namespace

TEST_SUITE("fusion_executor") {

TEST_CASE("average becomes a sum and one division by the ranks; other reductions are left to "
          "the backend") {
  auto local = co::make_local_backend();
  CHECK(co::backend_reduction(hvd::op::average) == hvd::op::sum);
  CHECK(co::backend_reduction(hvd::op::max) == hvd::op::max);
  std::vector<float> f{3.f, -6.f};
  co::reduce_in_place(*local, f.data(), f.size(), hvd::dtype::float32, hvd::op::average, 3);
  CHECK(f == std::vector<float>{1.f, -2.f});
  std::vector<int64_t> i{-3, 3, 7};
  co::reduce_in_place(*local, i.data(), i.size(), hvd::dtype::int64, hvd::op::average, 2);
  CHECK(i == std::vector<int64_t>{-1, 1, 3}); // truncated toward zero
  std::vector<double> d{4.0};
  co::reduce_in_place(*local, d.data(), d.size(), hvd::dtype::float64, hvd::op::sum, 4);
  CHECK(d[0] == 4.0);
  std::vector<hvd::half> h{hvd::half(5.f)};
  co::reduce_in_place(*local, h.data(), h.size(), hvd::dtype::float16, hvd::op::average, 2);
  CHECK(static_cast<float>(h[0]) == 2.5f);
}

TEST_CASE("a fused group of sums and averages comes back in place, each averaged tensor divided "
          "once, whatever its padding") {
  auto local = co::make_local_backend();
  co::fusion_executor fusion{size_t{1} << 20, 2, nullptr};
  std::vector<int32_t> a(3, 10), b(17, 7), c(64, -5);
  auto oa = allreduce(a.size(), hvd::dtype::int32, hvd::op::sum);
  auto ob = allreduce(b.size(), hvd::dtype::int32, hvd::op::average);
  auto oc = allreduce(c.size(), hvd::dtype::int32, hvd::op::average);
  std::vector<co::fusion_item> items{{&oa, a.data()}, {&ob, b.data()}, {&oc, c.data()}};
  fusion.run(*local, items);
  CHECK(a == std::vector<int32_t>(3, 10));
  CHECK(b == std::vector<int32_t>(17, 3));
  CHECK(c == std::vector<int32_t>(64, -2));
  // A group of one runs in place, through the same recipe.
  std::vector<float> x(5, 8.f);
  auto ox = allreduce(x.size(), hvd::dtype::float32, hvd::op::average);
  std::vector<co::fusion_item> one{{&ox, x.data()}};
  fusion.run(*local, one);
  CHECK(x == std::vector<float>(5, 4.f));
}

TEST_CASE("scale factors give Horovod's bits: float32 by (float)factor in float, the average "
          "folded into the postscale factor; float64 in double; integers truncated") {
  auto local = co::make_local_backend();
  auto bits = [](float x) { return std::bit_cast<uint32_t>(x); };
  // The factor Horovod's test_horovod_allreduce_prescale draws (seed 1234).
  const double factor = 0.1915194503788923;
  std::vector<float> pre{75.0f, 75.0f};
  co::reduce_in_place(*local, pre.data(), pre.size(), hvd::dtype::float32, hvd::op::sum, 1,
                      {.prescale_factor = factor});
  // 75.0f x (float)factor; through double it would be 0x4165d2c6 (and the
  // sum of two ranks' 0x41e5d2c6 where Horovod has 0x41e5d2c7).
  CHECK(bits(pre[0]) == 0x4165d2c7);
  CHECK(bits(pre[1]) == 0x4165d2c7);
  std::vector<float> post{150.0f};
  co::reduce_in_place(*local, post.data(), 1, hvd::dtype::float32, hvd::op::sum, 1,
                      {.postscale_factor = factor});
  CHECK(bits(post[0]) == 0x41e5d2c7);
  // Average with a postscale factor: one multiplication by
  // (float)(factor / 3); dividing first, then scaling, gives 0xc197aef4.
  std::vector<float> avg{-297.0f};
  co::reduce_in_place(*local, avg.data(), 1, hvd::dtype::float32, hvd::op::average, 3,
                      {.postscale_factor = factor});
  CHECK(bits(avg[0]) == 0xc197aef3);
  std::vector<double> d{75.0};
  co::reduce_in_place(*local, d.data(), 1, hvd::dtype::float64, hvd::op::sum, 1,
                      {.prescale_factor = factor});
  CHECK(d[0] == 75.0 * factor);
  std::vector<hvd::half> h{hvd::half(75.0f)};
  co::reduce_in_place(*local, h.data(), 1, hvd::dtype::float16, hvd::op::sum, 1,
                      {.prescale_factor = factor});
  CHECK(static_cast<float>(h[0]) == static_cast<float>(hvd::half(75.0f * float(factor))));
  std::vector<int32_t> i{75, -75};
  co::reduce_in_place(*local, i.data(), i.size(), hvd::dtype::int32, hvd::op::sum, 1,
                      {.prescale_factor = factor});
  CHECK(i == std::vector<int32_t>{14, -14});
}

TEST_CASE("a batch's timeline event names its tensors and sums their bytes") {
  auto oa = allreduce(3, hvd::dtype::float32, hvd::op::sum);
  oa.name = "grad/a";
  auto ob = allreduce(5, hvd::dtype::float32, hvd::op::sum);
  ob.name = "grad/b";
  std::vector<co::fusion_item> items{{&oa, nullptr}, {&ob, nullptr}};
  auto e = co::batch_event(items, "gloo");
  CHECK(e.op == co::op_kind::allreduce);
  CHECK(e.tensors == 2);
  CHECK(e.bytes == 32);
  CHECK(e.has_type);
  CHECK(std::string{e.names, e.names_length} == "grad/a,grad/b");
  CHECK(std::string{e.backend} == "gloo");
  ob.type = hvd::dtype::float64;
  CHECK_FALSE(co::batch_event(items, "gloo").has_type);
}

} // TEST_SUITE
