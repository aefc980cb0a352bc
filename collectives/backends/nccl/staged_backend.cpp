// Host-staged device collectives: device -> pinned host memory -> the host
// backend (Gloo) -> device. Serves when NCCL cannot (two ranks on one GPU
// with NCCL < 2.30; docs/development/platform-notes.md, "NCCL: two ranks on
// one GPU").

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "device_backend.hpp"

namespace hvactor::collectives::cuda {

namespace {

class staged_backend final : public device_memory {
public:
  staged_backend(const topology& t, int device, backend& host, std::chrono::milliseconds timeout)
    : device_memory(t, device, host, timeout) {
  }

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) override {
    auto bytes = count * size_of(t);
    auto* h = to_host(data, bytes, in_, in_size_);
    host_.allreduce(h, count, t, o);
    to_device(data, h, bytes);
  }

  // The host backend's own reduce-scatter (one node: each rank reduces
  // only its part in shared memory), not an allreduce and a slice.
  void reducescatter(void* data, size_t count, std::span<const size_t> counts, int rank,
                     hvd::dtype t, hvd::op o, void* out) override {
    auto elem = size_of(t);
    auto mine = counts[static_cast<size_t>(rank)] * elem;
    auto* h_in = to_host(data, count * elem, in_, in_size_);
    auto* h_out = pinned(std::max<size_t>(mine, 1), out_, out_size_);
    host_.reducescatter(h_in, count, counts, rank, t, o, h_out);
    to_device(out, h_out, mine);
  }

  void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                  hvd::dtype t) override {
    auto elem = size_of(t);
    auto mine = counts[static_cast<size_t>(topo_.rank)] * elem;
    auto total = std::accumulate(counts.begin(), counts.end(), size_t{0}) * elem;
    auto* h_in = to_host(in, mine, in_, in_size_);
    auto* h_out = pinned(std::max<size_t>(total, 1), out_, out_size_);
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
    auto* h_out = pinned(std::max<size_t>(recvs * elem, 1), out_, out_size_);
    host_.alltoallv(h_in, send_counts, h_out, recv_counts, t);
    to_device(out, h_out, recvs * elem);
  }

  const char* name() const override {
    return "host-staged";
  }
};

} // namespace

std::unique_ptr<backend> make_staged_backend(const topology& t, int device, backend& host,
                                             std::chrono::milliseconds timeout) {
  return std::make_unique<staged_backend>(t, device, host, timeout);
}

} // namespace hvactor::collectives::cuda
