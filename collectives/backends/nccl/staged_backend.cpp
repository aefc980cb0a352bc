// Host-staged device collectives: device -> pinned host memory -> the host
// backend (Gloo) -> device. Serves when NCCL cannot (two ranks on one GPU
// with NCCL < 2.30; docs/development/platform-notes.md, "NCCL: two ranks on
// one GPU").

#include <numeric>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "device_backend.hpp"

namespace hvactor::collectives::cuda {

namespace {

class staged_backend final : public device_memory {
public:
  staged_backend(const topology& t, int device, backend& host, std::chrono::milliseconds timeout)
    : device_memory(t, device, timeout), host_(host) {
  }

  ~staged_backend() override {
    for (auto* p : {in_, out_})
      if (p)
        cudaFreeHost(p);
  }

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) override {
    auto bytes = count * size_of(t);
    auto* h = to_host(data, bytes, in_, in_size_);
    host_.allreduce(h, count, t, o);
    to_device(data, h, bytes);
  }

  void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                  hvd::dtype t) override {
    auto elem = size_of(t);
    auto mine = counts[static_cast<size_t>(topo_.rank)] * elem;
    auto total = std::accumulate(counts.begin(), counts.end(), size_t{0}) * elem;
    auto* h_in = to_host(in, mine, in_, in_size_);
    auto* h_out = pinned(total, out_, out_size_);
    host_.allgatherv(h_in, h_out, counts, t);
    to_device(out, h_out, total);
  }

  void broadcast(void* data, size_t count, hvd::dtype t, int root) override {
    auto bytes = count * size_of(t);
    auto* h = to_host(data, bytes, in_, in_size_);
    host_.broadcast(h, count, t, root);
    to_device(data, h, bytes);
  }

  void barrier() override {
    host_.barrier();
  }

  void alltoallv(const void* in, std::span<const int64_t> send_counts, void* out,
                 std::span<const int64_t> recv_counts, hvd::dtype t) override {
    auto elem = size_of(t);
    auto sends = static_cast<size_t>(std::accumulate(send_counts.begin(), send_counts.end(),
                                                     int64_t{0}));
    auto recvs = static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(),
                                                     int64_t{0}));
    auto* h_in = to_host(in, sends * elem, in_, in_size_);
    auto* h_out = pinned(recvs * elem, out_, out_size_);
    host_.alltoallv(h_in, send_counts, h_out, recv_counts, t);
    to_device(out, h_out, recvs * elem);
  }

  const char* name() const override {
    return "host-staged";
  }

private:
  char* pinned(size_t bytes, char*& buf, size_t& size) {
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

  // Copies device memory into a pinned buffer and waits for it.
  char* to_host(const void* src, size_t bytes, char*& buf, size_t& size) {
    require_usable("collective (host-staged)");
    activate();
    auto* h = pinned(std::max<size_t>(bytes, 1), buf, size);
    if (bytes > 0)
      check(cudaMemcpyAsync(h, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync D2H",
            topo_, device_);
    finish();
    return h;
  }

  void to_device(void* dst, const char* src, size_t bytes) {
    activate();
    if (bytes > 0)
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync H2D", topo_, device_);
  }

  backend& host_;
  char* in_ = nullptr;
  size_t in_size_ = 0;
  char* out_ = nullptr;
  size_t out_size_ = 0;
};

} // namespace

std::unique_ptr<backend> make_staged_backend(const topology& t, int device, backend& host,
                                             std::chrono::milliseconds timeout) {
  return std::make_unique<staged_backend>(t, device, host, timeout);
}

} // namespace hvactor::collectives::cuda
