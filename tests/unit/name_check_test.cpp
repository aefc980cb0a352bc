// The negotiator's name check as a plain class: every rank's list of what it is
// about to run goes in, the common prefix comes out, or one collective_error
// naming both sides and both ranks; and the byte encoding the ranks exchange.

#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>

#include "collectives/engine/name_check.hpp"
#include "collectives/engine/operation.hpp"

namespace co = hvactor::collectives;
namespace hvd = hvactor::hvd;

namespace {

co::operation tensor(const std::string& name, size_t count = 4,
                     hvd::dtype type = hvd::dtype::float32, hvd::op reduction = hvd::op::sum) {
  co::operation op;
  op.kind = co::op_kind::allreduce;
  op.name = name;
  op.count = count;
  op.type = type;
  op.reduction = reduction;
  return op;
}

co::op_list batch(std::vector<co::operation> ops) {
  return {true, std::move(ops)};
}

co::op_list single(co::operation op) {
  return {false, {std::move(op)}};
}

/// The message agree() throws, or "" if it does not throw.
std::string disagreement(co::name_check& check, const std::vector<co::op_list>& lists) {
  try {
    check.agree(lists);
  } catch (const hvactor::collective_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_SUITE("name_check") {

TEST_CASE("identical lists on every rank agree on their whole length and number what ran") {
  co::name_check check{1, "node-b"};
  std::vector<co::operation> ops{tensor("grad/a"), tensor("grad/b", 10, hvd::dtype::float64)};
  CHECK(check.agree({batch(ops), batch(ops), batch(ops)}) == 2);
  CHECK(check.checked() == 2);
  co::operation bc;
  bc.kind = co::op_kind::broadcast;
  bc.count = 8;
  bc.root = 2;
  CHECK(check.agree({single(bc), single(bc)}) == 1);
  co::operation barrier;
  barrier.kind = co::op_kind::barrier;
  CHECK(check.agree({single(barrier), single(barrier)}) == 1);
  CHECK(check.checked() == 4);
}

TEST_CASE("a different name, dtype, size or reduction fails naming the operation's number, both "
          "sides and both ranks") {
  struct variant {
    std::string what;
    co::operation other;
    const char* rank0_text;
    const char* rank2_text;
  };
  for (auto& v : std::vector<variant>{
         {"name", tensor("grad/b"), "(float32 x 4, sum)",
          "allreduce 'grad/b' (float32 x 4, sum)"},
         {"dtype", tensor("grad/a", 4, hvd::dtype::int32), "(float32 x 4, sum)",
          "(int32 x 4, sum)"},
         {"size", tensor("grad/a", 5), "(float32 x 4, sum)", "(float32 x 5, sum)"},
         {"op", tensor("grad/a", 4, hvd::dtype::float32, hvd::op::average), "(float32 x 4, sum)",
          "(float32 x 4, average)"}}) {
    CAPTURE(v.what);
    co::name_check check{1, "node-b"};
    CHECK(check.agree({single(tensor("first")), single(tensor("first")),
                       single(tensor("first"))})
          == 1);
    auto what = disagreement(check, {batch({tensor("grad/a")}), batch({tensor("grad/a")}),
                                     batch({v.other})});
    CAPTURE(what);
    CHECK(contains(what, "operation #1"));
    CHECK(contains(what, std::string{"rank 0 runs allreduce 'grad/a' "} + v.rank0_text));
    CHECK(contains(what, std::string{"where rank 2 runs "}));
    CHECK(contains(what, v.rank2_text));
    CHECK(contains(what, "seen on rank 1 on node-b"));
    CHECK(check.checked() == 1);
  }
}

TEST_CASE("a different kind, device, or broadcast root fails; a different allgather count does "
          "not") {
  co::operation gather;
  gather.kind = co::op_kind::allgather;
  gather.count = 3;
  auto other_gather = gather;
  other_gather.count = 7;
  co::name_check check{0, "node-a"};
  CHECK(check.agree({single(gather), single(other_gather)}) == 1);
  co::operation bc;
  bc.kind = co::op_kind::broadcast;
  bc.count = 3;
  auto other_root = bc;
  other_root.root = 1;
  auto what = disagreement(check, {single(bc), single(other_root)});
  CHECK(contains(what, "rank 0 runs broadcast (float32 x 3, root 0) where rank 1 runs "
                       "broadcast (float32 x 3, root 1)"));
  what = disagreement(check, {single(tensor("")), single(bc)});
  CHECK(contains(what, "rank 0 runs allreduce (float32 x 4, sum) where rank 1 runs broadcast"));
  auto on_device = tensor("");
  on_device.device = true;
  what = disagreement(check, {single(tensor("")), single(on_device)});
  CHECK(contains(what, "where rank 1 runs allreduce (device, float32 x 4, sum)"));
}

TEST_CASE("a batch of async allreduces against an operation that runs alone fails at once, "
          "saying which side is the async one") {
  co::name_check check{0, "node-a"};
  co::operation sync = tensor("");
  auto what = disagreement(check, {batch({tensor("grad/a"), tensor("grad/b")}), single(sync)});
  CHECK(contains(what, "operation #0"));
  CHECK(contains(what, "rank 0 runs async allreduce 'grad/a' (float32 x 4, sum) where rank 1 "
                       "runs allreduce (float32 x 4, sum)"));
  what = disagreement(check, {single(sync), batch({tensor("grad/a")})});
  CHECK(contains(what, "where rank 1 runs async allreduce 'grad/a'"));
}

TEST_CASE("lists of different lengths agree on their common prefix; a difference beyond it is "
          "not checked yet") {
  co::name_check check{2, "node-c"};
  std::vector<co::operation> three{tensor("a"), tensor("b"), tensor("c")};
  std::vector<co::operation> two{tensor("a"), tensor("b")};
  std::vector<co::operation> other_third{tensor("a"), tensor("b"), tensor("x")};
  CHECK(check.agree({batch(three), batch(two), batch(other_third)}) == 2);
  CHECK(check.checked() == 2);
  // The next batch starts at the third tensor, numbered 2.
  auto what = disagreement(check, {batch({tensor("c")}), batch({tensor("x")})});
  CHECK(contains(what, "operation #2"));
  CHECK(contains(what, "'c'"));
  CHECK(contains(what, "'x'"));
}

TEST_CASE("every list empty runs nothing; one empty list against another's operation fails "
          "naming \"nothing\"") {
  co::name_check check{0, "node-a"};
  CHECK(check.agree({}) == 0);
  CHECK(check.agree({batch({}), batch({})}) == 0);
  CHECK(check.checked() == 0);
  auto what = disagreement(check, {batch({tensor("a")}), batch({})});
  CHECK(contains(what, "rank 0 runs allreduce 'a' (float32 x 4, sum) where rank 1 runs nothing"));
}

TEST_CASE("encode and decode round-trip every field; other bytes are refused naming the rank") {
  auto op = tensor("grad/\xe2\x82\xac", 123456789012, hvd::dtype::float16, hvd::op::product);
  op.device = true;
  co::operation bc;
  bc.kind = co::op_kind::broadcast;
  bc.root = 3;
  bc.type = hvd::dtype::int64;
  co::op_list list{true, {op, bc, co::operation{}}};
  auto back = co::name_check::decode(co::name_check::encode(list), 1);
  CHECK(back.batch);
  REQUIRE(back.ops.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(co::same_collective(back.ops[i], list.ops[i]));
    CHECK(back.ops[i].count == list.ops[i].count);
  }
  CHECK(co::describe(back.ops[0]) == "allreduce 'grad/\xe2\x82\xac' (device, float16 x "
                                     "123456789012, product)");
  CHECK_FALSE(co::name_check::decode(co::name_check::encode(single(bc)), 0).batch);
  for (std::string bad : {std::string{}, std::string{"X"}, std::string{"B\x01"}}) {
    CAPTURE(bad);
    try {
      co::name_check::decode(bad, 3);
      FAIL("no error");
    } catch (const hvactor::collective_error& e) {
      CHECK(contains(e.what(), "rank 3"));
    }
  }
}

} // TEST_SUITE
