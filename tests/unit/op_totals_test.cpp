// The collective totals' wire form (collectives/observe/op_stats.hpp): what
// a rank writes to its stderr and its colocator reads back for the
// dashboard. The stderr is the user's too: garbage must never become
// numbers, and no line may grow the board without bound.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "collectives/observe/op_stats.hpp"

namespace co = hvactor::collectives;

TEST_SUITE("op totals") {

TEST_CASE("totals come back as they were written, in order") {
  std::vector<co::op_total> in{{"allgather", "gloo", 3, 12288, 0.25},
                               {"allreduce", "shm", 1000000, 4096000000ull, 12.5}};
  auto out = co::decode_op_totals(co::encode_op_totals(in), 64, 512);
  REQUIRE(out.size() == 2);
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK(out[i].op == in[i].op);
    CHECK(out[i].path == in[i].path);
    CHECK(out[i].count == in[i].count);
    CHECK(out[i].bytes == in[i].bytes);
    CHECK(out[i].seconds == doctest::Approx(in[i].seconds));
  }
}

TEST_CASE("malformed entries are skipped, good ones beside them kept") {
  auto out = co::decode_op_totals("allreduce/shm=1,2,0.5;garbage;broadcast=1,2,3;x/y=1,2;"
                                  "x/y=a,2,3;x/y=1,2,3,4;x/y=-1,2,3;x/y=1,2,3e400;"
                                  "barrier/gloo=4,0,0.001;",
                                  64, 512);
  REQUIRE(out.size() == 2);
  CHECK(out[0].op == "allreduce");
  CHECK(out[0].count == 1);
  CHECK(out[1].op == "barrier");
  CHECK(out[1].path == "gloo");
  CHECK(out[1].count == 4);
  CHECK(co::decode_op_totals("", 64, 512).empty());
  CHECK(co::decode_op_totals(";;;", 64, 512).empty());
}

TEST_CASE("at most max_entries entries, names cut to max_name bytes") {
  std::string many;
  for (int i = 0; i < 1000; ++i)
    many += "op" + std::to_string(i) + "/" + std::string(2000, 'p') + "=1,1,1;";
  auto out = co::decode_op_totals(many, 64, 512);
  CHECK(out.size() == 64);
  CHECK(out.back().op == "op63");
  CHECK(out.back().path.size() == 512);
}

} // TEST_SUITE
