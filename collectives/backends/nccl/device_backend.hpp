#pragma once

// Internal: the two device backends. Both own one CUDA stream on their
// device; the engine's packing (copy, zero, scratch) and averaging (scale)
// run on it, and finish() waits for it with the job's timeout, so a peer
// that died never hangs a rank inside cudaStreamSynchronize.

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <memory>

#include "collectives/backends/backend.hpp"

namespace hvactor::collectives::cuda {

/// Common device-memory side of both backends. `host` (the engine's host
/// backend, which outlives this one) carries what the device library
/// cannot: Adasum for both, every collective for the host-staged one.
class device_memory : public backend {
public:
  device_memory(const topology& t, int device, backend& host, std::chrono::milliseconds timeout);
  ~device_memory() override;

  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void* scratch(size_t bytes) override;
  std::shared_ptr<void> zeros(size_t bytes) override;
  void adasum(void* data, size_t count, hvd::dtype t, int rank, int ranks) override;
  void scale(void* data, size_t count, hvd::dtype t, int divisor) override;
  void multiply(void* data, size_t count, hvd::dtype t, double factor) override;
  void finish() override;
  void wait_ready(const std::shared_ptr<void>& ready) override;

  cudaStream_t stream() const noexcept {
    return stream_;
  }

protected:
  /// Makes this backend's GPU the calling thread's current device: calls
  /// arrive on the caller's thread or the engine's, and CUDA's current
  /// device is per thread (a kernel or cudaMalloc would land on GPU 0).
  void activate();
  /// Polls the stream until it drained or `timeout_` passed; `abort` runs
  /// before throwing on timeout (NCCL aborts its communicator there).
  void wait_stream(const char* what, const std::function<void()>& abort);
  /// Throws when an earlier failure left the backend unusable.
  void require_usable(const char* what) const;

  /// A pinned host buffer of at least `bytes` (grown in `buf`/`size`).
  char* pinned(size_t bytes, char*& buf, size_t& size);
  /// Copies `bytes` of device memory at `src` into pinned `buf` and waits.
  char* to_host(const void* src, size_t bytes, char*& buf, size_t& size);
  /// Queues the copy of `bytes` of pinned `src` to device `dst`.
  void to_device(void* dst, const char* src, size_t bytes);

  topology topo_;
  int device_ = 0;
  backend& host_;
  /// Pinned staging buffers: the input side and the output side.
  char* in_ = nullptr;
  size_t in_size_ = 0;
  char* out_ = nullptr;
  size_t out_size_ = 0;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_size_ = 0;
  bool broken_ = false;
};

/// NCCL: one communicator per job (ncclCommInitRank on `id`); `host`
/// runs Adasum.
std::unique_ptr<backend> make_nccl_backend(const topology& t, int device, const ncclUniqueId& id,
                                           backend& host, std::chrono::milliseconds timeout);

/// Host-staged: device to pinned host memory, `host` (Gloo), host to device.
std::unique_ptr<backend> make_staged_backend(const topology& t, int device, backend& host,
                                             std::chrono::milliseconds timeout);

} // namespace hvactor::collectives::cuda
