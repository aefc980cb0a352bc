#pragma once

// One Gloo collective per function, in hvactor's types, on a context whose
// pairs the caller connected (lazy_mesh::ensure with mesh_peers' set). Gloo's
// exceptions pass through; gloo_backend turns them into hvactor's errors.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <gloo/context.h>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives::gloo_calls {

using ctx_ptr = std::shared_ptr<::gloo::Context>;
using std::chrono::milliseconds;

/// Gloo's ring allreduce, or its bcube.
void allreduce(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, hvd::op o, bool bcube,
               uint32_t tag, milliseconds timeout);

/// A small allreduce as one allgather (n - 1 messages per rank, where the
/// ring sends up to 2n) and a local reduction of the copies in rank order
/// (the same bits on every rank). `gathered` and `sources` are scratch.
void gather_allreduce(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, hvd::op o,
                      std::vector<std::byte>& gathered, std::vector<const void*>& sources,
                      uint32_t tag, milliseconds timeout);

void allgatherv(const ctx_ptr& ctx, const void* in, void* out, std::span<const size_t> counts,
                hvd::dtype t, uint32_t tag, milliseconds timeout);

void broadcast(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, int root, uint32_t tag,
               milliseconds timeout);

void barrier(const ctx_ptr& ctx, uint32_t tag, milliseconds timeout);

void alltoallv(const ctx_ptr& ctx, const void* in, std::span<const int64_t> send_counts, void* out,
               std::span<const int64_t> recv_counts, hvd::dtype t, uint32_t tag,
               milliseconds timeout);

} // namespace hvactor::collectives::gloo_calls
