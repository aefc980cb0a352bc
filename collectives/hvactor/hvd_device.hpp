#pragma once

/// hvd collectives on GPU memory (included by <hvactor/hvd.hpp>).
///
/// In a CUDA build, hvd::init() gives every rank a device backend when all
/// ranks see a GPU: NCCL (communicator from an ncclUniqueId passed through
/// the job's rendezvous store), or, when NCCL cannot serve the job (two
/// ranks on one GPU with NCCL < 2.30), a host-staged path: device to host,
/// Gloo, host to device, chosen at init with a log line saying why. Each
/// rank uses device `local_rank % visible devices`. Calls order themselves
/// after the work already queued on `stream` and return when the result is
/// in place (the stream may be reused at once). Without CUDA, or with no
/// GPU, every call here throws hvactor::error saying why.

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvactor/hvd_types.hpp"
#include "hvactor/hvd_core.hpp"

struct CUstream_st; // cudaStream_t is CUstream_st*

namespace hvactor::hvd {

/// A CUDA stream (cudaStream_t); nullptr is the legacy default stream.
using cuda_stream = CUstream_st*;

/// `size` elements of type T at `data` in GPU memory.
template <element T>
struct device_span {
  T* data = nullptr;
  size_t size = 0;
};

/// True when this process has a device backend (after init()).
bool gpu_available();

/// "nccl", "host-staged", or "none: <why>" (after init()).
std::string gpu_backend();

/// The CUDA device index this rank's GPU collectives run on (local_rank %
/// visible devices), or -1 when it has no device backend. Device buffers
/// passed to hvd must live on it.
int gpu_device();

namespace detail {
void device_allreduce(void* data, size_t count, dtype t, op o, cuda_stream s,
                      scale_factors f = {}, std::span<const int64_t> shape = {});
void device_allgather(const void* in, void* out, size_t count, dtype t, cuda_stream s);
void device_broadcast(void* data, size_t count, dtype t, int root, cuda_stream s);
} // namespace detail

/// In-place allreduce of device memory; `f` as for host memory (the
/// scaling runs on the GPU).
template <element T>
void allreduce(device_span<T> x, op o, cuda_stream stream, scale_factors f = {}) {
  detail::device_allreduce(x.data, x.size, dtype_of<T>(), o, stream, f);
}

/// Every rank's `in` (equal sizes on all ranks) into `out`
/// (size() x in.size elements), in rank order.
template <element T>
void allgather(device_span<const T> in, device_span<T> out, cuda_stream stream) {
  if (out.size != in.size * static_cast<size_t>(size()))
    throw std::invalid_argument("hvd::allgather (device): out must hold size() x in.size elements");
  detail::device_allgather(in.data, out.data, in.size, dtype_of<T>(), stream);
}

/// Root's `x` to every rank (equal sizes).
template <element T>
void broadcast(device_span<T> x, int root, cuda_stream stream) {
  detail::device_broadcast(x.data, x.size, dtype_of<T>(), root, stream);
}

namespace detail {
/// Device memory for an alltoall's result, asked for once the received
/// counts (elements from each rank, in rank order) are known; called on
/// the thread that runs the collective.
using device_allocator = std::function<void*(std::span<const int64_t> recv_counts)>;

/// Horovod's reducescatter of device memory (the rules of the host call:
/// op::sum or op::average, rows of `row` elements split over the ranks);
/// this rank's rows land in `out`, on the device.
void device_reducescatter(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                          cuda_stream s, scale_factors f = {}, const std::string& name = {});
/// The same queued, ordered after the work queued on `s` so far; `in` and
/// `out` (and `keep_alive`) must live until it finished.
handle device_reducescatter_async(const void* in, size_t count, size_t row, void* out, dtype t,
                                  op o, std::string name, cuda_stream s, scale_factors f = {},
                                  std::shared_ptr<void> keep_alive = nullptr);
/// Alltoall of device memory (send_counts as for host memory; empty:
/// size() equal parts): the counts travel through the host backend, the
/// data on the device backend into `allocate`'s memory. Returns the
/// received counts.
std::vector<int64_t> device_alltoall(const void* in, size_t count,
                                     std::span<const int64_t> send_counts, dtype t,
                                     cuda_stream s, const device_allocator& allocate);
/// The same queued after the work queued on `s`; the received counts in
/// result->counts.
handle device_alltoall_async(const void* in, size_t count, std::span<const int64_t> send_counts,
                             dtype t, std::string name, cuda_stream s, device_allocator allocate,
                             const std::shared_ptr<async_result>& result);

handle device_allreduce_async(void* data, size_t count, dtype t, op o, std::string name,
                              cuda_stream s, scale_factors f = {},
                              std::span<const int64_t> shape = {});
} // namespace detail

/// Queues an in-place allreduce of device memory; fused with the other
/// queued device allreduces like host tensors (HOROVOD_FUSION_THRESHOLD).
/// The GPU runs it after the work queued on `stream` before this call (a
/// CUDA event recorded there): the caller is not blocked, so a gradient
/// hook goes on queueing backward's kernels. synchronize() returns when the
/// result is in place.
template <element T>
handle allreduce_async(device_span<T> x, op o, std::string name, cuda_stream stream,
                       scale_factors f = {}) {
  return detail::device_allreduce_async(x.data, x.size, dtype_of<T>(), o, std::move(name),
                                        stream, f);
}

} // namespace hvactor::hvd
