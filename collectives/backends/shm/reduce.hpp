#pragma once

#include <cstddef>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives::shm {

/// out[i] = srcs[0][i] o srcs[1][i] o ... o srcs[n-1][i], left to right,
/// for `count` elements, written to `out` and, when not null, also to
/// `copy`. Any output may alias any source. Results are exactly Gloo's
/// (gloo::sum/product/min/max<T> applied pairwise in the same order; fp16
/// rounds after each step), so every rank that reduces the same sources in
/// the same order gets the same bits. `o` is never op::average.
void reduce(void* out, void* copy, const void* const* srcs, int n, size_t count, hvd::dtype t,
            hvd::op o);

} // namespace hvactor::collectives::shm
