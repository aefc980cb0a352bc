#include "hvactor/collectives/algorithm.hpp"

#include <cstdlib>
#include <cstring>

namespace hvactor::collectives {

allreduce_algorithm choose_allreduce(size_t bytes, int ranks) {
  if (auto forced = std::getenv("HVACTOR_GLOO_ALLREDUCE")) {
    if (std::strcmp(forced, "ring") == 0)
      return allreduce_algorithm::ring;
    if (std::strcmp(forced, "bcube") == 0)
      return allreduce_algorithm::bcube;
  }
  // Measured (README, benchmarks/allreduce with HVACTOR_GLOO_ALLREDUCE
  // forced): with two ranks bcube's per-call p50 is lower than the ring's
  // from 4 KiB to 64 KiB, the ring's is half of bcube's from 256 KiB up;
  // with more ranks than cores bcube's loop thread spins (notes 1.5) and the
  // ring wins everywhere.
  if (ranks == 2 && bytes >= 4096 && bytes < (256u << 10))
    return allreduce_algorithm::bcube;
  return allreduce_algorithm::ring;
}

const char* to_string(allreduce_algorithm a) {
  return a == allreduce_algorithm::bcube ? "bcube" : "ring";
}

} // namespace hvactor::collectives
