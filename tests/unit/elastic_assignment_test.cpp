// The elastic assignment's codec (collectives/elastic/elastic_assignment.hpp):
// what the driver writes for a worker's place in a generation and what
// hvd::init reads back, one declaration for both sides.

#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "hvactor/errors.hpp"
#include "collectives/elastic/elastic_assignment.hpp"

using namespace hvactor::elastic_protocol;

TEST_SUITE("elastic assignment") {

TEST_CASE("every valid place round-trips, and removed is one byte") {
  std::mt19937 rng{7};
  for (int i = 0; i < 1000; ++i) {
    assignment a;
    a.size = 1 + static_cast<int32_t>(rng() % 100000);
    a.rank = static_cast<int32_t>(rng() % static_cast<uint32_t>(a.size));
    a.local_size = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(a.size));
    a.local_rank = static_cast<int32_t>(rng() % static_cast<uint32_t>(a.local_size));
    a.cross_size = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(a.size));
    a.cross_rank = static_cast<int32_t>(rng() % static_cast<uint32_t>(a.cross_size));
    auto b = decode(encode(a));
    CHECK_FALSE(b.removed);
    CHECK(b.rank == a.rank);
    CHECK(b.size == a.size);
    CHECK(b.local_rank == a.local_rank);
    CHECK(b.local_size == a.local_size);
    CHECK(b.cross_rank == a.cross_rank);
    CHECK(b.cross_size == a.cross_size);
  }
  auto removed = encode(removal());
  CHECK(removed.size() == 1);
  CHECK(decode(removed).removed);
}

TEST_CASE("a wrong length or tag, and a rank outside its size, are errors naming it") {
  auto good = encode(assignment{{.rank = 1, .size = 2, .local_rank = 1, .local_size = 2}});
  auto shorter = good;
  shorter.pop_back();
  CHECK_THROWS_WITH_AS(decode(shorter), doctest::Contains("malformed elastic assignment (24 bytes"),
                       hvactor::error);
  auto tagged = good;
  tagged[0] = 9;
  CHECK_THROWS_WITH_AS(decode(tagged), doctest::Contains("tag 9"), hvactor::error);
  CHECK_THROWS_AS(decode({}), hvactor::error);
  // The old text form is refused, not misread.
  std::string text = "0 2 0 2 0 1";
  CHECK_THROWS_AS(decode(std::vector<char>(text.begin(), text.end())), hvactor::error);
  CHECK_THROWS_WITH_AS(decode(encode(assignment{{.rank = 2, .size = 2}})),
                       doctest::Contains("out of range: rank 2 of 2"), hvactor::error);
  CHECK_THROWS_AS(decode(encode(assignment{{.rank = 0, .size = 2, .local_rank = -1}})),
                  hvactor::error);
  CHECK_THROWS_AS(decode(encode(assignment{{.rank = 0, .size = 2, .local_size = 3}})),
                  hvactor::error);
  CHECK_THROWS_AS(decode(encode(assignment{{.rank = 0, .size = 0}})), hvactor::error);
}

TEST_CASE("300 random byte strings decode or throw hvactor::error, nothing else") {
  std::mt19937 rng{11};
  for (int i = 0; i < 300; ++i) {
    std::vector<char> junk(rng() % 40);
    for (auto& c : junk)
      c = static_cast<char>(rng());
    if (!junk.empty() && i % 2 == 0)
      junk[0] = 1; // past the tag check more often
    try {
      auto a = decode(junk);
      CHECK((a.removed || (a.rank >= 0 && a.rank < a.size)));
    } catch (const hvactor::error&) {
    }
  }
}

} // TEST_SUITE
