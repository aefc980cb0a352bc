#pragma once

// Internal: a param_space as a flat list of leaves ("model/layers" ->
// constant, domain or grid), what the searchers walk.

#include <string>
#include <vector>

#include "hvactor/tune.hpp"

namespace hvactor::tune {

struct leaf {
  std::string path;
  const param* p;
};

/// Every leaf, in path order; std::invalid_argument for an empty space or
/// an empty nested space.
std::vector<leaf> flatten(const param_space& space);

/// "uniform(0.1, 1)" / "[1, 2, 3]" / the value: how a leaf prints.
std::string describe(const param& p);

/// A value as config tables show it.
std::string show(const value& v);

} // namespace hvactor::tune
