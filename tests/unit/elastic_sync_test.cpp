// hvd::elastic's state broadcast (state::sync, every reset): a small state
// goes in one broadcast, a large one in two, and every size comes back
// whole. At 64 ranks on loaded hosts a broadcast is a few hundred ms of
// each reset (docs/guides/elastic.md, "Elastic at scale").

#include <cstdlib>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/elastic.hpp>
#include <hvactor/hvd.hpp>

#include "collectives/observe/op_stats.hpp"

namespace hvd = hvactor::hvd;

namespace {

// Broadcasts counted so far in this process (every path).
long broadcasts() {
  long n = 0;
  for (auto& t : hvactor::collectives::op_totals())
    if (t.op == "broadcast")
      n += static_cast<long>(t.count);
  return n;
}

} // namespace

TEST_SUITE("elastic state sync") {

TEST_CASE("a state of up to 1016 bytes is synced with one broadcast, a larger one with two, and "
          "every size comes back whole") {
  hvd::shutdown();
  hvd::init();
  for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{1016}, size_t{1017}, size_t{4096},
                      size_t{70001}}) {
    CAPTURE(size);
    std::vector<char> data(size);
    for (size_t i = 0; i < size; ++i)
      data[i] = static_cast<char>((i * 131 + size) & 0xff);
    auto want = data;
    long before = broadcasts();
    hvd::elastic::detail::broadcast_bytes(data, 0);
    CHECK(data == want);
    CHECK(broadcasts() - before == (size <= 1016 ? 1 : 2));
  }
  hvd::shutdown();
}

} // TEST_SUITE
