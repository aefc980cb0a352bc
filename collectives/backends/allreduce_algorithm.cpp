#include "collectives/backends/allreduce_algorithm.hpp"

#include <stdexcept>
#include <string>

namespace hvactor::collectives {

const char* to_string(allreduce_algorithm a) {
  switch (a) {
    case allreduce_algorithm::bcube:
      return "bcube";
    case allreduce_algorithm::gather:
      return "gather";
    case allreduce_algorithm::doubling:
      return "doubling";
    case allreduce_algorithm::ring:
      break;
  }
  return "ring";
}

allreduce_algorithm_policy allreduce_algorithm_policy::parse(std::string_view value,
                                                             std::string_view variable) {
  if (value.empty() || value == "auto")
    return {};
  if (value == "ring")
    return allreduce_algorithm_policy{allreduce_algorithm::ring};
  if (value == "bcube")
    return allreduce_algorithm_policy{allreduce_algorithm::bcube};
  if (value == "gather")
    return allreduce_algorithm_policy{allreduce_algorithm::gather};
  if (value == "doubling")
    return allreduce_algorithm_policy{allreduce_algorithm::doubling};
  throw std::invalid_argument(std::string{"hvd::init: "} + std::string{variable} + "='"
                              + std::string{value}
                              + "' is not a Gloo allreduce algorithm; use ring, bcube, gather, doubling, or auto "
                                "(or leave it unset) for the automatic choice");
}

} // namespace hvactor::collectives
