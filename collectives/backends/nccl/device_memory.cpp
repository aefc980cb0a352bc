#include <fmt/format.h>

#include "cuda_check.hpp"
#include "device_backend.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives::cuda {

device_memory::device_memory(const topology& t, int device, std::chrono::milliseconds timeout)
  : topo_(t), device_(device), timeout_(timeout) {
  check(cudaSetDevice(device_), "cudaSetDevice", topo_, device_);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", topo_,
        device_);
}

device_memory::~device_memory() {
  cudaSetDevice(device_);
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
