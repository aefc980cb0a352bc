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
#include <span>
#include <stdexcept>
#include <string>

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
