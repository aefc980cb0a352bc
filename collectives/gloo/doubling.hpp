#pragma once

// Recursive doubling: the allreduce of small messages among many ranks.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <gloo/context.h>

#include "hvactor/collectives/types.hpp"

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
