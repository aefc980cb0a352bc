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
  // Measured (README, benchmarks/allreduce): with two ranks bcube is ahead
  // of the ring between 4 KiB and 1 MiB; with more ranks than cores bcube's
  // loop thread spins and the ring wins everywhere.
  if (ranks == 2 && bytes >= 4096 && bytes < (1u << 20))
    return allreduce_algorithm::bcube;
  return allreduce_algorithm::ring;
}

const char* to_string(allreduce_algorithm a) {
  return a == allreduce_algorithm::bcube ? "bcube" : "ring";
}

} // namespace hvactor::collectives
