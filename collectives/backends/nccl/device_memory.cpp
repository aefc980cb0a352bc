#include <algorithm>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "device_backend.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives::cuda {

device_memory::device_memory(const topology& t, int device, backend& host,
                             std::chrono::milliseconds timeout)
  : topo_(t), device_(device), host_(host), timeout_(timeout) {
  check(cudaSetDevice(device_), "cudaSetDevice", topo_, device_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", topo_,
        device_);
}

device_memory::~device_memory() {
  cudaSetDevice(device_);
  for (auto* p : {in_, out_})
    if (p)
      cudaFreeHost(p);
  if (scratch_)
    cudaFree(scratch_);
  if (stream_)
    cudaStreamDestroy(stream_);
}

void device_memory::activate() {
  check(cudaSetDevice(device_), "cudaSetDevice", topo_, device_);
}

void device_memory::require_usable(const char* what) const {
  if (broken_)
    throw collective_error(fmt::format("hvd::{} on {}: an earlier GPU collective failed; call "
                                       "hvd::shutdown() and hvd::init() to reconnect",
                                       what, where(topo_, device_)));
}

void device_memory::copy(void* dst, const void* src, size_t bytes) {
  activate();
  if (bytes > 0)
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync",
          topo_, device_);
}

void device_memory::zero(void* dst, size_t bytes) {
  activate();
  if (bytes > 0)
    check(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync", topo_, device_);
}

void* device_memory::scratch(size_t bytes) {
  activate();
  if (bytes > scratch_size_) {
    // Nothing queued may still use the old buffer.
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", topo_, device_);
    if (scratch_)
      cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_size_ = 0;
    check(cudaMalloc(&scratch_, bytes), "cudaMalloc (fusion buffer)", topo_, device_);
    scratch_size_ = bytes;
  }
  return scratch_;
}

std::shared_ptr<void> device_memory::zeros(size_t bytes) {
  activate();
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc (a joined rank's zeros)", topo_,
        device_);
  // Freed by whichever thread drops the last owner, after the collective
  // that read it finished (the engine waits for the stream first).
  std::shared_ptr<void> owned{p, [device = device_](void* q) {
                                int keep = -1;
                                cudaGetDevice(&keep);
                                cudaSetDevice(device);
                                cudaFree(q);
                                if (keep >= 0)
                                  cudaSetDevice(keep);
                              }};
  zero(p, bytes);
  return owned;
}

// NCCL has no Adasum (and the host-staged path reduces on the host
// anyway): the tensor goes to pinned host memory, the host backend runs
// Horovod's Adasum on it, and the result comes back; the caller's
// finish() waits for that last copy.
void device_memory::adasum(void* data, size_t count, hvd::dtype t, int rank, int ranks) {
  if (ranks <= 1 || count == 0)
    return;
  auto bytes = count * hvd::size_of(t);
  auto* h = to_host(data, bytes, in_, in_size_);
  host_.adasum(h, count, t, rank, ranks);
  to_device(data, h, bytes);
}

char* device_memory::pinned(size_t bytes, char*& buf, size_t& size) {
  if (bytes > size) {
    finish(); // queued copies may still read the old buffer
    if (buf)
      cudaFreeHost(buf);
    buf = nullptr;
    size = 0;
    check(cudaMallocHost(reinterpret_cast<void**>(&buf), bytes), "cudaMallocHost", topo_,
          device_);
    size = bytes;
  }
  return buf;
}

char* device_memory::to_host(const void* src, size_t bytes, char*& buf, size_t& size) {
  require_usable("collective (host-staged)");
  activate();
  auto* h = pinned(std::max<size_t>(bytes, 1), buf, size);
  if (bytes > 0)
    check(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H",
          topo_, device_);
  finish();
  return h;
}

void device_memory::to_device(void* dst, const char* src, size_t bytes) {
  activate();
  if (bytes > 0)
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync H2D", topo_, device_);
}

void device_memory::scale(void* data, size_t count, hvd::dtype t, int divisor) {
  activate();
  if (launch_scale(data, count, t, divisor, stream_))
    check(cudaGetLastError(), "average kernel launch", topo_, device_);
}

void device_memory::multiply(void* data, size_t count, hvd::dtype t, double factor) {
  activate();
  if (launch_multiply(data, count, t, factor, stream_))
    check(cudaGetLastError(), "scale factor kernel launch", topo_, device_);
}

void device_memory::wait_stream(const char* what, const std::function<void()>& abort) {
  activate();
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  poll_pause pause;
  for (;;) {
    auto rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess)
      return;
    if (rc != cudaErrorNotReady) {
      broken_ = true;
      check(rc, what, topo_, device_);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      broken_ = true;
      if (abort)
        abort();
      throw collective_error(fmt::format(
        "{} on {} did not complete within {} ms: a peer rank died or stopped calling the same "
        "collectives",
        what, where(topo_, device_), timeout_.count()));
    }
    pause();
  }
}

void device_memory::wait_ready(const std::shared_ptr<void>& ready) {
  if (!ready)
    return;
  activate();
  check(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(ready.get()), 0),
        "cudaStreamWaitEvent (the caller's stream)", topo_, device_);
}

void device_memory::finish() {
  wait_stream("GPU collective", {});
}

} // namespace hvactor::collectives::cuda
