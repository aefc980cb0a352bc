#pragma once

#include <cstddef>
#include <string>

namespace hvactor::collectives {

/// Gloo allreduce algorithms hvactor uses. All of them run through Gloo's
/// options API (gloo::allreduce) on one context: Gloo's legacy algorithm
/// classes are never mixed with it (notes/collectives.md, 1.5).
enum class allreduce_algorithm { ring, bcube };

/// The algorithm for one allreduce of `bytes` bytes among `ranks` ranks,
/// chosen from measurements on a 2-core loopback machine (README); the
/// environment variable HVACTOR_GLOO_ALLREDUCE=ring|bcube forces one.
allreduce_algorithm choose_allreduce(size_t bytes, int ranks);

/// "ring" or "bcube".
const char* to_string(allreduce_algorithm a);

} // namespace hvactor::collectives
