#pragma once

// Recursive doubling: the allreduce of small messages among many ranks.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <gloo/context.h>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// Allreduces `count` elements at `data` over `ctx` by recursive doubling:
/// with p the largest power of two <= n, rank r >= p first hands its buffer
/// to rank r - p and gets the result back at the end; ranks 0..p-1 exchange
/// their whole buffer with the rank at distance 1, 2, 4, ... p/2 (log2 p
/// steps, one message each way per step). Gloo's ring takes 2(n - 1) steps
/// and gather n - 1, so at 64 ranks a 4-byte allreduce is 6 message delays
/// here against 63 there. Every reduction puts the lower rank's copy first,
/// so every rank ends with the same bits (also for floating point).
/// `scratch` holds the peer's copy (grown, never shrunk); `tag` must be the
/// same on every rank and differ from concurrent operations' tags. Gloo's
/// exceptions pass through (a wait past `timeout`, a closed pair).
void doubling_allreduce(const std::shared_ptr<::gloo::Context>& ctx, void* data, size_t count,
                        hvd::dtype t, hvd::op o, std::vector<std::byte>& scratch, uint32_t tag,
                        std::chrono::milliseconds timeout);

/// Folds the peer's copy (`theirs`, as many bytes) into this rank's;
/// `theirs_lower`: the peer's rank is below this one's.
using doubling_fold = std::function<void(const void* theirs, bool theirs_lower)>;

/// How one step of doubling moves `bytes` (the caller knows how many)
/// between this rank and `peer`: send() this rank's copy at `data`,
/// recv() the peer's into `into`, swap() both at once (send `data`,
/// receive into `into`). Each returns once its moves are done.
struct doubling_moves {
  std::function<void(int peer, const void* data)> send;
  std::function<void(int peer, void* into)> recv;
  std::function<void(int peer, const void* data, void* into)> swap;
};

/// doubling_allreduce's steps for rank `me` of `n` over the copy at
/// `data`, with `scratch` (as large) for the peer's, moved by `moves`.
void doubling_schedule(int n, int me, void* data, void* scratch, const doubling_fold& fold,
                       const doubling_moves& moves);

/// doubling_allreduce's steps over `bytes` bytes at `data` with a fold of
/// the caller's: every rank ends with the same bytes when `fold` gives
/// the same result on both ends of a step (the lower rank's copy first).
void doubling_combine(const std::shared_ptr<::gloo::Context>& ctx, void* data, size_t bytes,
                      const doubling_fold& fold, std::vector<std::byte>& scratch, uint32_t tag,
                      std::chrono::milliseconds timeout);

/// The data a negotiation header carries over Gloo's ordinary pairs: every
/// header exchange there sends the header's words and this many bytes
/// (zeros when it carries none), so that a rank that sends a small
/// allreduce with its header meets one that sends its header alone in the
/// same step, as in shared memory (backend::allreduce_with_header). The
/// small-message lane sends what each frame holds, and carries more:
/// lane_data_bytes.
inline constexpr size_t header_data_bytes = 1024;

/// The most bytes of data a header exchange over the small-message lane
/// carries (every doubling step sends the whole message), where the
/// allreduce policy would not take the ring. Measured on emulated 1
/// Gbit/s nodes (docs/benchmarks/spmd.md, medians): 2 nodes x 64 KiB one
/// exchange at the wire's speed (636 -> 551 us, Open MPI 551); 3 nodes x
/// 64 KiB 1.22 -> 1.10 ms; 16 nodes x 16 KiB 3.6 -> 1.15 ms.
inline constexpr size_t lane_data_bytes = size_t{64} << 10;

/// The bytes of a header exchange's frame: the header's `words` and
/// header_data_bytes, or `data_bytes` where more (the lane only).
inline size_t header_frame_bytes(size_t words, size_t data_bytes = 0) {
  return words * sizeof(int64_t) + std::max(data_bytes, header_data_bytes);
}

/// Runs doubling's steps over `bytes` at `data` with `fold`, on some
/// transport: doubling_combine over a context, or the small-message lane.
/// `sending()` says how many of the bytes a step needs to send now (the
/// rest is data no peer will read); a transport may send only those.
/// The first `header_words` 64-bit words of `data` are a negotiation
/// header, which changes little from one exchange to the next: the lane
/// sends it as the differences (lane_frame.hpp).
using doubling_combiner = std::function<void(void* data, size_t bytes, size_t header_words,
                                             const doubling_fold& fold,
                                             const std::function<size_t()>& sending)>;

/// The negotiation header's exchange by recursive doubling (`combine`),
/// with `count` elements of `data` (none: nullptr, 0; more than
/// header_data_bytes only where `combine` is the lane) in the same
/// messages: `header` (`words` int64, header[data_word] 0 where this rank
/// sends data, -1 where not) comes back min-reduced, and `frame` holds the
/// message (header_frame_bytes(words, data bytes); only the header is
/// sent once the reduced header[data_word] is -1),
/// the data's reduction with `o` at frame.data() + words * 8. Two copies'
/// data are reduced when both say they carry data, so that reduction is
/// every rank's exactly when the reduced header[data_word] is 0 (and
/// valid when the ranks agree on the operation, which the reduced header
/// tells).
void doubling_header_exchange(const doubling_combiner& combine, int64_t* header, size_t words,
                              size_t data_word, const void* data, size_t count, hvd::dtype t,
                              hvd::op o, std::vector<std::byte>& frame);

/// Allgathers by recursive doubling: rank r's `bytes[r]` bytes at `in` land
/// in `out` at the sum of the ranks' before it, on every rank (`in` may be
/// that place in `out`). The same steps as doubling_allreduce, each
/// carrying the blocks the two ranks have so far (ranks past p hand over
/// their block first and get all of `out` at the end): log2(p) steps where
/// Gloo's ring allgatherv takes n - 1. `tag` as for doubling_allreduce.
void doubling_allgatherv(const std::shared_ptr<::gloo::Context>& ctx, const void* in, void* out,
                         std::span<const size_t> bytes, uint32_t tag,
                         std::chrono::milliseconds timeout);

/// The peers `rank` exchanges messages with in doubling_allreduce and
/// doubling_allgatherv among
/// `size` ranks (the same relation seen from either end).
std::vector<int> doubling_peers(int rank, int size);

} // namespace hvactor::collectives
