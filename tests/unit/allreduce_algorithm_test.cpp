// The Gloo allreduce algorithm choice as a plain policy: the measured
// thresholds (bcube for 2 ranks from 4 KiB up to, not including, 256 KiB;
// the ring everywhere else), forced algorithms, and the parsing of
// HVACTOR_GLOO_ALLREDUCE's value at hvd::init.

#include "internal/algorithm.hpp"

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

TEST_CASE("with 2 ranks the automatic policy takes bcube from 4 KiB up to 256 KiB and the ring "
          "below and above") {
  allreduce_algorithm_policy p;
  CHECK(p.choose(0, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(4, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(4 * kib - 1, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(4 * kib, 2) == allreduce_algorithm::bcube);
  CHECK(p.choose(64 * kib, 2) == allreduce_algorithm::bcube);
  CHECK(p.choose(256 * kib - 1, 2) == allreduce_algorithm::bcube);
  CHECK(p.choose(256 * kib, 2) == allreduce_algorithm::ring);
  CHECK(p.choose(size_t{256} << 20, 2) == allreduce_algorithm::ring);
  CHECK(allreduce_algorithm_policy::bcube_min_bytes == 4 * kib);
  CHECK(allreduce_algorithm_policy::bcube_max_bytes == 256 * kib);
}

TEST_CASE("the automatic policy answers exactly the contract for every size from 0 to 1 MiB on "
          "1 to 8 ranks") {
  allreduce_algorithm_policy p;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (size_t bytes = 0; bytes <= 1024 * kib; bytes += 4) {
      bool bcube = ranks == 2 && bytes >= 4 * kib && bytes < 256 * kib;
      auto expected = bcube ? allreduce_algorithm::bcube : allreduce_algorithm::ring;
      if (p.choose(bytes, ranks) != expected) {
        CAPTURE(ranks);
        CAPTURE(bytes);
        FAIL("choose() breaks its contract");
      }
    }
  }
}

TEST_CASE("with more than 2 ranks (or one) the automatic policy always takes the ring") {
  allreduce_algorithm_policy p;
  for (int ranks : {1, 3, 4, 8, 64})
    for (size_t bytes : {size_t{4}, 4 * kib, 16 * kib, 255 * kib, 256 * kib, size_t{1} << 30}) {
      CAPTURE(ranks);
      CAPTURE(bytes);
      CHECK(p.choose(bytes, ranks) == allreduce_algorithm::ring);
    }
}

TEST_CASE("a forced algorithm is taken for every size and rank count") {
  for (auto forced : {allreduce_algorithm::ring, allreduce_algorithm::bcube}) {
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

TEST_CASE("parse reads ring and bcube as forced and an empty value or auto as automatic") {
  CHECK(allreduce_algorithm_policy::parse("ring", "V").forced() == allreduce_algorithm::ring);
  CHECK(allreduce_algorithm_policy::parse("bcube", "V").forced() == allreduce_algorithm::bcube);
  CHECK_FALSE(allreduce_algorithm_policy::parse("", "V").forced().has_value());
  CHECK_FALSE(allreduce_algorithm_policy::parse("auto", "V").forced().has_value());
  CHECK_FALSE(allreduce_algorithm_policy{}.forced().has_value());
  CHECK(std::string{to_string(allreduce_algorithm::ring)} == "ring");
  CHECK(std::string{to_string(allreduce_algorithm::bcube)} == "bcube");
}

TEST_CASE("a value that is no algorithm throws invalid_argument naming the variable, the value "
          "and the accepted values") {
  for (std::string bad : {"Ring", "bcube ", "halving_doubling", "1"}) {
    CAPTURE(bad);
    auto what = parse_error(bad);
    CHECK(what.find("HVACTOR_GLOO_ALLREDUCE='" + bad + "'") != std::string::npos);
    CHECK(what.find("ring") != std::string::npos);
    CHECK(what.find("bcube") != std::string::npos);
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
