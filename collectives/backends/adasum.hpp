#pragma once

// Internal: Horovod's Adasum (op::adasum; horovod/common/ops/adasum/
// adasum.h), on any host backend. Two ranks' gradients a and b combine as
//   adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient is 1 where its norm is ~0), in a binary tree over the
// ranks: pairs (0,1), (2,3), ..., then pairs of pairs, ... (a power of 2
// ranks). As Horovod: vector halving, distance doubling. At level L each
// rank exchanges half of what it holds with rank ^ L, the ranks of each
// group of 2L sum the dot products and squared norms of their pieces (so
// the coefficients are those of the groups' whole vectors), and combine;
// then the pieces travel back (distance halving). Dot products accumulate
// in double; the combination is computed in double and stored in the
// tensor's type (16-bit floats through float).

#include <cstddef>

#include "collectives/backends/backend.hpp"

namespace hvactor::collectives {

/// Refuses Adasum where Horovod does, before anything is sent (on every
/// rank alike): a dtype other than float16, float32, float64 ("Adasum
/// ... supports float16, float32 and float64"), a number of ranks that is
/// not a power of 2 (Horovod's "Running Adasum with non-power of 2 ranks is
/// not supported yet."). Device memory is accepted: the device backends
/// run it through host memory (backend::adasum). Throws
/// std::invalid_argument naming `call`.
void check_adasum(hvd::dtype t, int ranks, const char* call);

/// Adasum of `count` elements at `data` across the `ranks` ranks of `b`
/// (this one is `rank`), in place: the same result on every rank. The
/// pairwise exchanges go through b.alltoallv, the sums of dot products
/// through b.allreduce.
void adasum_allreduce(backend& b, void* data, size_t count, hvd::dtype t, int rank, int ranks);

} // namespace hvactor::collectives
