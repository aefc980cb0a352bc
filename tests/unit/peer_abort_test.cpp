// The announcement that stops every rank's Gloo waits once one rank's call
// failed (collectives/gloo/peer_abort.hpp): its text, and the first
// announcement winning. Its effect on real Gloo waits is in
// collectives_failure_test.

#include <limits>
#include <string>

#include <doctest/doctest.h>

#include "collectives/gloo/peer_abort.hpp"

using hvactor::collectives::announcement;
using hvactor::collectives::parse_announcement;
using hvactor::collectives::peer_abort;
using hvactor::collectives::peer_announced_failure;

TEST_SUITE("peer_abort") {

TEST_CASE("an announcement reads back as its announcer and culprit; anything else is refused") {
  int a = 0, c = 0;
  REQUIRE(parse_announcement(announcement(2, 3), a, c));
  CHECK(a == 2);
  CHECK(c == 3);
  REQUIRE(parse_announcement(announcement(0, -1), a, c));
  CHECK(a == 0);
  CHECK(c == -1);
  for (const char* bad : {"", "2", "2 ", " 2 3", "2 3 ", "2  3", "x 3", "2 y", "2 3x",
                          "99999999999999999999 1", "1 99999999999999999999", "2\n3"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_announcement(bad, a, c));
  }
}

TEST_CASE("once raised, every check throws the first announcement; later ones change nothing") {
  peer_abort abort;
  CHECK_NOTHROW(abort.check());
  abort.raise(1, 3);
  abort.raise(2, 0);
  abort.raise("the generation ended");
  for (int i = 0; i < 2; ++i) {
    try {
      abort.check();
      FAIL("check() did not throw");
    } catch (const peer_announced_failure& e) {
      CHECK(e.announcer == 1);
      CHECK(e.culprit == 3);
      CHECK(std::string{e.what()} == "rank 1 announced that the collectives failed");
    }
  }
  peer_abort ended;
  ended.raise("rendezvous scope 'job/3' was closed");
  try {
    ended.check();
    FAIL("check() did not throw");
  } catch (const peer_announced_failure& e) {
    CHECK(e.announcer == -1);
    CHECK(std::string{e.what()} == "rendezvous scope 'job/3' was closed");
  }
}

} // TEST_SUITE
