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

/// Common device-memory side of both backends.
class device_memory : public backend {
public:
  device_memory(const topology& t, int device, std::chrono::milliseconds timeout);
  ~device_memory() override;

  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void* scratch(size_t bytes) override;
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

  topology topo_;
  int device_ = 0;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_size_ = 0;
  bool broken_ = false;
};

/// NCCL: one communicator per job (ncclCommInitRank on `id`).
std::unique_ptr<backend> make_nccl_backend(const topology& t, int device, const ncclUniqueId& id,
                                           std::chrono::milliseconds timeout);

/// Host-staged: device to pinned host memory, `host` (Gloo), host to device.
std::unique_ptr<backend> make_staged_backend(const topology& t, int device, backend& host,
                                             std::chrono::milliseconds timeout);

} // namespace hvactor::collectives::cuda
