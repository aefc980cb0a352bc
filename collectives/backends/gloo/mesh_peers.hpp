#pragma once

// The peers each Gloo collective hvactor runs exchanges messages with, for
// lazy_mesh::ensure (peer_addresses.hpp). Each is a symmetric relation: if
// rank a talks to b in an operation, b talks to a in it, so that both ends
// of a pair connect it in the same operation. Read off Gloo's algorithms
// (Debian's libgloo 0.0~git20220518).

#include <vector>

namespace hvactor::collectives::mesh_peers {

/// Gloo's ring allreduce and its allgatherv: the two neighbours.
std::vector<int> ring(int rank, int size);

/// Gloo's broadcast from `root`: a binomial tree over the ranks counted
/// from the root.
std::vector<int> broadcast(int rank, int size, int root);

/// Gloo's dissemination barrier: rank +- 1, 2, 4, ... (mod size).
std::vector<int> barrier(int rank, int size);

/// Every other rank (alltoall, bcube), starting after `rank`.
std::vector<int> all(int rank, int size);

} // namespace hvactor::collectives::mesh_peers
