// The check every job runs before a collective, as plain code: the
// fingerprint the ranks reduce tells matching lists from mismatched ones
// (names aside), and explain() names both ranks and both values in
// Horovod's words.

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>

#include "collectives/engine/name_check.hpp"
#include "collectives/engine/operation.hpp"
#include "collectives/engine/shape_check.hpp"

namespace co = hvactor::collectives;
namespace hvd = hvactor::hvd;

namespace {

co::operation allreduce(size_t count, hvd::dtype type = hvd::dtype::float32,
                        hvd::op reduction = hvd::op::sum, std::string name = "") {
  co::operation op;
  op.kind = co::op_kind::allreduce;
  op.count = count;
  op.type = type;
  op.reduction = reduction;
  op.name = std::move(name);
  return op;
}

co::operation of_kind(co::op_kind kind, size_t count, int root = 0) {
  co::operation op;
  op.kind = kind;
  op.count = count;
  op.root = root;
  return op;
}

co::op_list single(co::operation op) {
  return {false, {std::move(op)}};
}

/// explain()'s message, or "" when it does not throw.
std::string explained(const std::vector<co::op_list>& lists) {
  try {
    co::shape_check::explain(lists, 1, "node-b");
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_SUITE("shape_check") {

TEST_CASE("lists that may run together have one fingerprint, names and per-rank counts aside") {
  using co::shape_check::fingerprint;
  CHECK(fingerprint(single(allreduce(10, hvd::dtype::float32, hvd::op::sum, "a")))
        == fingerprint(single(allreduce(10, hvd::dtype::float32, hvd::op::sum, "b"))));
  // allgather and alltoall take a different count per rank.
  CHECK(fingerprint(single(of_kind(co::op_kind::allgather, 3)))
        == fingerprint(single(of_kind(co::op_kind::allgather, 7))));
  CHECK(fingerprint(single(of_kind(co::op_kind::alltoall, 3)))
        == fingerprint(single(of_kind(co::op_kind::alltoall, 8))));
  for (auto& l : {single(allreduce(10)), single(of_kind(co::op_kind::barrier, 0))}) {
    auto f = fingerprint(l);
    CHECK(f >= 0);
    CHECK(f < (int64_t{1} << 62));
  }
}

TEST_CASE("a different count, type, reduction, root, kind, batch flag or length changes the "
          "fingerprint") {
  using co::shape_check::fingerprint;
  auto base = fingerprint(single(allreduce(10)));
  CHECK(fingerprint(single(allreduce(11))) != base);
  CHECK(fingerprint(single(allreduce(10, hvd::dtype::float64))) != base);
  CHECK(fingerprint(single(allreduce(10, hvd::dtype::float32, hvd::op::max))) != base);
  CHECK(fingerprint(single(of_kind(co::op_kind::broadcast, 10))) != base);
  CHECK(fingerprint(co::op_list{true, {allreduce(10)}}) != base);
  CHECK(fingerprint(co::op_list{true, {allreduce(10), allreduce(10)}})
        != fingerprint(co::op_list{true, {allreduce(10)}}));
  CHECK(fingerprint(single(of_kind(co::op_kind::broadcast, 10, 0)))
        != fingerprint(single(of_kind(co::op_kind::broadcast, 10, 1))));
  co::operation on_device = allreduce(10);
  on_device.device = true;
  CHECK(fingerprint(single(on_device)) != base);
}

TEST_CASE("explain names both ranks and both counts of mismatched allreduce sizes") {
  auto what = explained({single(allreduce(10)), single(allreduce(10)), single(allreduce(12))});
  CAPTURE(what);
  CHECK(contains(what, "Mismatched allreduce tensor sizes"));
  CHECK(contains(what, "rank 0 sent a tensor of 10 elements (float32)"));
  CHECK(contains(what, "rank 2 sent one of 12 elements"));
  CHECK(contains(what, "seen on rank 1 of 3 on node-b"));
}

TEST_CASE("explain names types, reductions, roots, kinds and batch lengths in Horovod's words") {
  struct variant {
    co::op_list rank0, rank1;
    std::vector<std::string> parts;
  };
  for (auto& v : std::vector<variant>{
         {single(allreduce(4)), single(allreduce(4, hvd::dtype::int32)),
          {"Mismatched allreduce data types", "rank 0 sent float32", "rank 1 sent int32"}},
         {single(allreduce(4)), single(allreduce(4, hvd::dtype::float32, hvd::op::max)),
          {"Mismatched allreduce operations", "rank 0 asked for sum", "rank 1 for max"}},
         {single(of_kind(co::op_kind::broadcast, 4, 0)),
          single(of_kind(co::op_kind::broadcast, 4, 1)),
          {"Mismatched broadcast root ranks", "rank 0 specified root rank 0",
           "rank 1 specified root rank 1"}},
         {single(of_kind(co::op_kind::broadcast, 4, 0)),
          single(of_kind(co::op_kind::broadcast, 5, 0)),
          {"Mismatched broadcast tensor sizes", "4 elements", "5 elements"}},
         {single(allreduce(4)), single(of_kind(co::op_kind::broadcast, 4)),
          {"Mismatched collective operations", "rank 0 runs allreduce", "rank 1 runs broadcast"}},
         {co::op_list{true, {allreduce(4, hvd::dtype::float32, hvd::op::sum, "g")}},
          single(allreduce(4)),
          {"rank 0 runs async allreduce 'g'", "rank 1 runs allreduce (float32 x 4, sum)"}},
         {co::op_list{true, {allreduce(4, hvd::dtype::float32, hvd::op::sum, "g"),
                             allreduce(6, hvd::dtype::float32, hvd::op::sum, "h")}},
          co::op_list{true, {allreduce(4, hvd::dtype::float32, hvd::op::sum, "g"),
                             allreduce(7, hvd::dtype::float32, hvd::op::sum, "h")}},
          {"Mismatched allreduce tensor sizes", "rank 0 sent a tensor 'h' of 6 elements",
           "rank 1 sent one of 7"}}}) {
    auto what = explained({v.rank0, v.rank1});
    CAPTURE(what);
    for (auto& part : v.parts)
      CHECK(contains(what, part));
  }
}

TEST_CASE("explain returns when the lists agree, names and allgather counts aside") {
  CHECK(explained({single(allreduce(4, hvd::dtype::float32, hvd::op::sum, "a")),
                   single(allreduce(4, hvd::dtype::float32, hvd::op::sum, "b"))})
        == "");
  CHECK(explained({single(of_kind(co::op_kind::allgather, 3)),
                   single(of_kind(co::op_kind::allgather, 9))})
        == "");
}

TEST_CASE("tensors of as many elements but other shapes differ (Horovod's "
          "test_horovod_allreduce_error): fingerprint, same_shape and explain naming both shapes; "
          "the buffer API's count is the shape of one dimension") {
  auto shaped = [](std::vector<int64_t> dims, std::string name = "") {
    auto op = allreduce(22287, hvd::dtype::float32, hvd::op::sum, std::move(name));
    op.shape = std::move(dims);
    return op;
  };
  auto a = shaped({17, 1311}), b = shaped({17, 23, 57});
  CHECK_FALSE(co::same_shape(a, b));
  CHECK(co::shape_check::fingerprint(single(a)) != co::shape_check::fingerprint(single(b)));
  auto what = explained({single(a), single(b)});
  CAPTURE(what);
  CHECK(contains(what, "Mismatched allreduce tensor shapes: rank 0 sent a tensor of shape [17, "
                       "1311], but rank 1 sent a tensor of shape [17, 23, 57] (seen on rank 1 "
                       "of 2 on node-b)"));
  auto named = explained({single(shaped({17, 1311}, "w")), single(shaped({1311, 17}, "w"))});
  CHECK(contains(named, "rank 0 sent a tensor 'w' of shape [17, 1311], but rank 1 sent a tensor "
                        "of shape [1311, 17]"));
  // The buffer API (no shape) agrees with a 1-D tensor of its count only.
  auto flat = allreduce(22287);
  CHECK(co::same_shape(flat, shaped({22287})));
  CHECK(co::shape_check::fingerprint(single(flat))
        == co::shape_check::fingerprint(single(shaped({22287}))));
  CHECK_FALSE(co::same_shape(flat, a));
  CHECK(contains(explained({single(flat), single(a)}),
                 "rank 0 sent a tensor of shape [22287], but rank 1 sent a tensor of shape [17, "
                 "1311]"));
  // Allgather's counts (and so shapes) may differ per rank.
  auto g0 = of_kind(co::op_kind::allgather, 6), g1 = of_kind(co::op_kind::allgather, 6);
  g0.shape = {2, 3};
  g1.shape = {3, 2};
  CHECK(co::same_shape(g0, g1));
}

TEST_CASE("the shape travels in the exchanged lists (what explain compares on the other rank)") {
  auto op = allreduce(22287, hvd::dtype::float32, hvd::op::sum, "w");
  op.shape = {17, 23, 57};
  co::op_list list{true, {op, allreduce(3)}};
  auto back = co::name_check::decode(co::name_check::encode(list), 1);
  REQUIRE(back.ops.size() == 2);
  CHECK(back.ops[0].shape == std::vector<int64_t>{17, 23, 57});
  CHECK(back.ops[0].name == "w");
  CHECK(back.ops[1].shape.empty());
  CHECK(co::same_collective(back.ops[0], op));
  // A list cut inside the dimensions is malformed, not read past its end.
  auto bytes = co::name_check::encode(co::op_list{false, {op}});
  CHECK_THROWS_AS(co::name_check::decode(bytes.substr(0, bytes.size() - 12), 1),
                  hvactor::collective_error);
}

TEST_CASE("prefix keeps the batch flag and the first n operations") {
  co::op_list l{true, {allreduce(1), allreduce(2), allreduce(3)}};
  auto p = co::shape_check::prefix(l, 2);
  CHECK(p.batch);
  REQUIRE(p.ops.size() == 2);
  CHECK(p.ops[1].count == 2);
  CHECK(co::shape_check::prefix(l, 9).ops.size() == 3);
}

} // TEST_SUITE
