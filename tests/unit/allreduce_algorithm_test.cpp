// The Gloo allreduce algorithm choice as a plain policy: the measured
// threshold (gather while ranks x bytes <= 4 MiB, by recursive doubling
// from 4 ranks, the ring above), forced
// algorithms, and the parsing of HVACTOR_GLOO_ALLREDUCE's value at
// hvd::init.

#include "collectives/backends/allreduce_algorithm.hpp"

#include <stdlib.h>

#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include <hvactor/hvd.hpp>

using hvactor::collectives::allreduce_algorithm;
using hvactor::collectives::allreduce_algorithm_policy;

namespace {

constexpr size_t kib = 1024;

/// The message parse() throws, or "" if it does not throw.
std::string parse_error(const std::string& value) {
  try {
    allreduce_algorithm_policy::parse(value, "HVACTOR_GLOO_ALLREDUCE");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_SUITE("allreduce_algorithm_policy") {

TEST_CASE("the automatic policy gathers while ranks x bytes fit gather_max_bytes (4 MiB), by "
          "recursive doubling from 4 ranks, and takes the ring above") {
  allreduce_algorithm_policy p;
  CHECK(allreduce_algorithm_policy::gather_max_bytes == 4096 * kib);
  CHECK(p.choose(0, 2) == allreduce_algorithm::gather);
  CHECK(p.choose(4, 2) == allreduce_algorithm::gather);
  CHECK(p.choose(2048 * kib, 2) == allreduce_algorithm::gather);
  CHECK(p.choose(2048 * kib + 1, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(1024 * kib, 3) == allreduce_algorithm::gather);
  CHECK(p.choose(1024 * kib, 4) == allreduce_algorithm::doubling);
  CHECK(p.choose(1024 * kib + 1, 4) == allreduce_algorithm::ring);
  CHECK(p.choose(4, 128) == allreduce_algorithm::doubling);
  CHECK(p.choose(32 * kib, 128) == allreduce_algorithm::doubling);
  CHECK(p.choose(32 * kib + 1, 128) == allreduce_algorithm::ring);
  CHECK(p.choose(size_t{256} << 20, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(4, 1) == allreduce_algorithm::ring); // nothing to exchange
  // ranks x bytes never overflows.
  CHECK(p.choose(~size_t{0}, 4) == allreduce_algorithm::ring);
}

TEST_CASE("the automatic policy answers exactly the contract for every size from 0 to 2 MiB on "
          "1 to 8 ranks") {
  allreduce_algorithm_policy p;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t bytes = 0; bytes <= 2048 * kib; bytes += 4) {
      bool gather = ranks > 1 && bytes * static_cast<size_t>(ranks) <= 4096 * kib;
      auto expected = !gather    ? allreduce_algorithm::ring
                      : ranks < 4 ? allreduce_algorithm::gather
                                  : allreduce_algorithm::doubling;
      if (p.choose(bytes, ranks) != expected) {
        CAPTURE(ranks);
        CAPTURE(bytes);
        FAIL("choose() breaks its contract");
      }
    }
  }
}

TEST_CASE("over a network the automatic policy gathers only while ranks x bytes fit 512 KiB; a "
          "forced one is kept") {
  auto p = allreduce_algorithm_policy{}.over_network();
  CHECK(allreduce_algorithm_policy::network_gather_max_bytes == 512 * kib);
  CHECK(p.choose(4, 2) == allreduce_algorithm::gather);
  CHECK(p.choose(256 * kib, 2) == allreduce_algorithm::gather);
  CHECK(p.choose(256 * kib + 1, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(128 * kib, 4) == allreduce_algorithm::doubling);
  CHECK(p.choose(4 * kib, 128) == allreduce_algorithm::doubling);
  CHECK(p.choose(4 * kib + 1, 128) == allreduce_algorithm::ring);
  CHECK(p.choose(128 * kib + 1, 4) == allreduce_algorithm::ring);
  CHECK(p.choose(4, 1) == allreduce_algorithm::ring);
  CHECK(p.choose(~size_t{0}, 4) == allreduce_algorithm::ring);
  // Loopback keeps the 4 MiB bound; a forced algorithm stays forced.
  CHECK(allreduce_algorithm_policy{}.choose(1024 * kib, 2) == allreduce_algorithm::gather);
  auto ring = allreduce_algorithm_policy{allreduce_algorithm::gather}.over_network();
  CHECK(ring.choose(64 << 20, 2) == allreduce_algorithm::gather);
}

TEST_CASE("an allgather goes by recursive doubling from 4 ranks within the gather bound, unless "
          "the ring is forced") {
  allreduce_algorithm_policy p;
  CHECK_FALSE(p.doubling_allgather(4, 2));
  CHECK_FALSE(p.doubling_allgather(4, 3));
  CHECK(p.doubling_allgather(4, 4));
  CHECK(p.doubling_allgather(4096 * kib, 128));
  CHECK_FALSE(p.doubling_allgather(4096 * kib + 1, 4));
  CHECK(p.over_network().doubling_allgather(512 * kib, 64));
  CHECK_FALSE(p.over_network().doubling_allgather(512 * kib + 1, 64));
  CHECK_FALSE(allreduce_algorithm_policy{allreduce_algorithm::ring}.doubling_allgather(4, 8));
  CHECK(allreduce_algorithm_policy{allreduce_algorithm::gather}.doubling_allgather(4, 8));
}

TEST_CASE("a forced algorithm is taken for every size and rank count") {
  for (auto forced :
       {allreduce_algorithm::ring, allreduce_algorithm::bcube, allreduce_algorithm::gather,
        allreduce_algorithm::doubling}) {
    allreduce_algorithm_policy p{forced};
    CHECK(p.forced() == forced);
    for (int ranks : {1, 2, 3, 4, 16})
      for (size_t bytes : {size_t{0}, size_t{4}, 4 * kib, 64 * kib, 256 * kib, size_t{1} << 28}) {
        CAPTURE(ranks);
        CAPTURE(bytes);
        CHECK(p.choose(bytes, ranks) == forced);
      }
  }
}

TEST_CASE("parse reads ring, bcube, gather and doubling as forced and an empty value or auto as "
          "automatic") {
  CHECK(allreduce_algorithm_policy::parse("ring", "V").forced() == allreduce_algorithm::ring);
  CHECK(allreduce_algorithm_policy::parse("bcube", "V").forced() == allreduce_algorithm::bcube);
  CHECK(allreduce_algorithm_policy::parse("gather", "V").forced() == allreduce_algorithm::gather);
  CHECK(allreduce_algorithm_policy::parse("doubling", "V").forced()
        == allreduce_algorithm::doubling);
  CHECK_FALSE(allreduce_algorithm_policy::parse("", "V").forced().has_value());
  CHECK_FALSE(allreduce_algorithm_policy::parse("auto", "V").forced().has_value());
  CHECK_FALSE(allreduce_algorithm_policy{}.forced().has_value());
  CHECK(std::string{to_string(allreduce_algorithm::ring)} == "ring");
  CHECK(std::string{to_string(allreduce_algorithm::bcube)} == "bcube");
  CHECK(std::string{to_string(allreduce_algorithm::gather)} == "gather");
  CHECK(std::string{to_string(allreduce_algorithm::doubling)} == "doubling");
}

TEST_CASE("a value that is no algorithm throws invalid_argument naming the variable, the value "
          "and the accepted values") {
  for (std::string bad : {"Ring", "bcube ", "halving_doubling", "1"}) {
    CAPTURE(bad);
    auto what = parse_error(bad);
    CHECK(what.find("HVACTOR_GLOO_ALLREDUCE='" + bad + "'") != std::string::npos);
    CHECK(what.find("ring") != std::string::npos);
    CHECK(what.find("bcube") != std::string::npos);
    CHECK(what.find("gather") != std::string::npos);
    CHECK(what.find("doubling") != std::string::npos);
    CHECK(what.find("auto") != std::string::npos);
  }
}

TEST_CASE("hvd::init with a bad HVACTOR_GLOO_ALLREDUCE throws invalid_argument before it "
          "connects, and works once the value is fixed") {
  namespace hvd = hvactor::hvd;
  hvd::shutdown();
  ::setenv("HVACTOR_GLOO_ALLREDUCE", "rnig", 1);
  std::string what;
  try {
    hvd::init();
  } catch (const std::invalid_argument& e) {
    what = e.what();
  }
  CHECK(what.find("HVACTOR_GLOO_ALLREDUCE='rnig'") != std::string::npos);
  CHECK_FALSE(hvd::is_initialized());
  ::setenv("HVACTOR_GLOO_ALLREDUCE", "bcube", 1);
  CHECK_NOTHROW(hvd::init());
  hvd::shutdown();
  ::unsetenv("HVACTOR_GLOO_ALLREDUCE");
}

} // TEST_SUITE
