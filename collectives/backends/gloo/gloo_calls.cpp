#include "gloo_calls.hpp"

#include <numeric>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>

#include "gloo_types.hpp"
#include "collectives/backends/shm/reduce.hpp"

namespace hvactor::collectives::gloo_calls {

namespace {

using gloo_types::reduction;
using gloo_types::with_type;

// Every buffer comes from the (abortable) context, so that a peer's
// announced failure stops this rank's waits (peer_abort.hpp).
std::unique_ptr<::gloo::transport::UnboundBuffer> buf(const ctx_ptr& ctx, const void* ptr,
                                                      size_t bytes) {
  return ctx->createUnboundBuffer(const_cast<void*>(ptr), bytes);
}

// Gloo's barrier with a buffer of hvactor's (Gloo makes its own otherwise).
struct barrier_options : ::gloo::BarrierOptions {
  barrier_options(const ctx_ptr& ctx, std::unique_ptr<::gloo::transport::UnboundBuffer> own)
    : BarrierOptions(ctx) {
    buffer = std::move(own);
  }
};

size_t elements(std::span<const int64_t> counts) {
  return static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
}

} // namespace

void allreduce(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, hvd::op o, bool bcube,
               uint32_t tag, milliseconds timeout) {
  with_type(t, [&]<class T>() {
    ::gloo::AllreduceOptions opts(ctx);
    opts.setAlgorithm(bcube ? ::gloo::AllreduceOptions::Algorithm::BCUBE
                            : ::gloo::AllreduceOptions::Algorithm::RING);
    opts.template setOutput<T>(buf(ctx, data, count * sizeof(T)));
    opts.setReduceFunction(reduction<T>(o));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::allreduce(opts);
  });
}

void gather_allreduce(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, hvd::op o,
                      std::vector<std::byte>& gathered, std::vector<const void*>& sources,
                      uint32_t tag, milliseconds timeout) {
  auto n = static_cast<size_t>(ctx->size);
  auto bytes = count * hvd::size_of(t);
  gathered.resize(n * bytes);
  std::vector<size_t> counts(n, count);
  with_type(t, [&]<class T>() {
    ::gloo::AllgathervOptions opts(ctx);
    opts.template setInput<T>(buf(ctx, data, bytes));
    opts.template setOutput<T>(buf(ctx, gathered.data(), n * bytes), std::move(counts));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::allgatherv(opts);
  });
  sources.resize(n);
  for (size_t r = 0; r < n; ++r)
    sources[r] = gathered.data() + r * bytes;
  shm::reduce(data, nullptr, sources.data(), ctx->size, count, t, o);
}

void allgatherv(const ctx_ptr& ctx, const void* in, void* out, std::span<const size_t> counts,
                hvd::dtype t, uint32_t tag, milliseconds timeout) {
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  with_type(t, [&]<class T>() {
    ::gloo::AllgathervOptions opts(ctx);
    opts.template setInput<T>(buf(ctx, in, counts[static_cast<size_t>(ctx->rank)] * sizeof(T)));
    opts.template setOutput<T>(buf(ctx, out, total * sizeof(T)),
                               std::vector<size_t>(counts.begin(), counts.end()));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::allgatherv(opts);
  });
}

void broadcast(const ctx_ptr& ctx, void* data, size_t count, hvd::dtype t, int root, uint32_t tag,
               milliseconds timeout) {
  with_type(t, [&]<class T>() {
    ::gloo::BroadcastOptions opts(ctx);
    opts.template setOutput<T>(buf(ctx, data, count * sizeof(T)));
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::broadcast(opts);
  });
}

void barrier(const ctx_ptr& ctx, uint32_t tag, milliseconds timeout) {
  barrier_options opts(ctx, buf(ctx, nullptr, 0));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  ::gloo::barrier(opts);
}

void alltoallv(const ctx_ptr& ctx, const void* in, std::span<const int64_t> send_counts, void* out,
               std::span<const int64_t> recv_counts, hvd::dtype t, uint32_t tag,
               milliseconds timeout) {
  with_type(t, [&]<class T>() {
    // Gloo refuses null pointers even for empty parts.
    T dummy[1];
    auto* src = const_cast<T*>(static_cast<const T*>(in));
    auto* dst = static_cast<T*>(out);
    ::gloo::AlltoallvOptions opts(ctx);
    opts.template setInput<T>(buf(ctx, src ? src : dummy, elements(send_counts) * sizeof(T)),
                              std::vector<int64_t>(send_counts.begin(), send_counts.end()));
    opts.template setOutput<T>(buf(ctx, dst ? dst : dummy, elements(recv_counts) * sizeof(T)),
                               std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    ::gloo::alltoallv(opts);
  });
}

} // namespace hvactor::collectives::gloo_calls
