#pragma once

// Internal: the element counts ranks announce before a collective whose
// sizes differ per rank (allgather, alltoall). The announcements come from
// peers, and the receiving buffer is sized from them: this class checks
// every one before a byte is written (a negative count, a total that
// overflows, another dtype), so a bad peer is a collective_error naming it,
// never a buffer overrun. Plain code: hvd.cpp exchanges, this decides.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// What a rank announces: its element count and its dtype, as two int64
/// words (count first).
inline constexpr size_t announcement_words = 2;

/// The two words a rank announces.
std::vector<int64_t> announce(size_t count, hvd::dtype t);

/// Checked per-rank counts and the bytes they add up to.
struct peer_counts {
  std::vector<size_t> counts;
  size_t total_bytes = 0;
};

/// allgather: `table` holds every rank's announcement in rank order. Every
/// dtype must be rank 0's (so every rank reaches the same verdict), every
/// count >= 0, and the total in bytes must fit in size_t; throws
/// collective_error naming the rank (and both dtypes) otherwise. `call`
/// names the operation ("hvd::allgather").
peer_counts check_allgather_counts(std::span<const int64_t> table, const char* call);

/// alltoall: `table` holds what each rank announced it sends to this one.
/// Every dtype must be `mine`; otherwise as above. `me` is this rank.
peer_counts check_alltoall_counts(std::span<const int64_t> table, hvd::dtype mine, int me,
                                  const char* call);

} // namespace hvactor::collectives
