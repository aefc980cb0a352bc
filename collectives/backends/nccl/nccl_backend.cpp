// NCCL on device memory: one communicator per job, one stream.

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "cuda_check.hpp"
#include "device_backend.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives::cuda {

namespace {

class nccl_backend final : public device_memory {
public:
  nccl_backend(const topology& t, int device, const ncclUniqueId& id, backend& host,
               std::chrono::milliseconds timeout)
    : device_memory(t, device, host, timeout) {
    // Nonblocking, so that a rank that never joins fails init after the
    // job's timeout instead of hanging it (every NCCL call is then polled).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    try {
      call("ncclCommInitRankConfig",
           ncclCommInitRankConfig(&comm_, t.size, id, t.rank, &config));
    } catch (...) {
      abort(); // the destructor does not run for a failed constructor
      throw;
    }
  }

  ~nccl_backend() override {
    if (comm_) {
      if (broken_)
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
  }

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) override {
    activate();
    require_usable("allreduce");
    if (t == hvd::dtype::boolean) // 0/1 bytes: a sum could store 2 in a bool
      o = o == hvd::op::sum || o == hvd::op::max ? hvd::op::max : hvd::op::min;
    call("ncclAllReduce", ncclAllReduce(data, data, count, nccl_type(t), nccl_op(o), comm_,
                                        stream_));
  }

  // Horovod's NCCLReducescatter: ncclReduceScatter when every rank's part
  // has the same size, else one ncclReduce per root (its part), grouped
  // (NCCL has no reduce-scatter-v). `data` is scratch.
  void reducescatter(void* data, size_t count, std::span<const size_t> counts, int rank,
                     hvd::dtype t, hvd::op o, void* out) override {
    (void)count;
    activate();
    require_usable("reducescatter");
    if (t == hvd::dtype::boolean)
      o = o == hvd::op::sum || o == hvd::op::max ? hvd::op::max : hvd::op::min;
    auto type = nccl_type(t);
    auto red = nccl_op(o);
    auto elem = size_of(t);
    bool equal = std::all_of(counts.begin(), counts.end(),
                             [&](size_t c) { return c == counts[0]; });
    if (equal) {
      if (counts[0] > 0)
        call("ncclReduceScatter",
             ncclReduceScatter(data, out, counts[0], type, red, comm_, stream_));
      return;
    }
    call("ncclGroupStart", ncclGroupStart());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      auto* part = static_cast<char*>(data) + offset * elem;
      // Only the root's receive buffer is written: this rank's part lands
      // in `out`, the others' in the scratch they were read from.
      void* recv = static_cast<int>(r) == rank ? out : part;
      if (counts[r] > 0)
        call("ncclReduce",
             ncclReduce(part, recv, counts[r], type, red, static_cast<int>(r), comm_, stream_));
      offset += counts[r];
    }
    call("ncclGroupEnd", ncclGroupEnd());
  }

  // Gathers, broadcasts and exchanges move bytes (ncclUint8): every dtype,
  // int16 too, which NCCL has no type for.
  void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                  hvd::dtype t) override {
    activate();
    require_usable("allgather");
    auto elem = size_of(t);
    bool equal = std::all_of(counts.begin(), counts.end(),
                             [&](size_t c) { return c == counts[0]; });
    if (equal) {
      call("ncclAllGather", ncclAllGather(in, out, counts[0] * elem, ncclUint8, comm_, stream_));
      return;
    }
    // Different sizes: one broadcast per root, grouped.
    call("ncclGroupStart", ncclGroupStart());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      auto* dst = static_cast<char*>(out) + offset * elem;
      const void* src = static_cast<int>(r) == topo_.rank ? in : dst;
      call("ncclBroadcast", ncclBroadcast(src, dst, counts[r] * elem, ncclUint8, static_cast<int>(r),
                                          comm_, stream_));
      offset += counts[r];
    }
    call("ncclGroupEnd", ncclGroupEnd());
  }

  void broadcast(void* data, size_t count, hvd::dtype t, int root) override {
    activate();
    require_usable("broadcast");
    call("ncclBroadcast", ncclBroadcast(data, data, count * size_of(t), ncclUint8, root, comm_,
                                        stream_));
  }

  void barrier() override {
    auto* one = scratch(sizeof(int32_t));
    zero(one, sizeof(int32_t));
    allreduce(one, 1, hvd::dtype::int32, hvd::op::sum);
    finish();
  }

  void alltoallv(const void* in, std::span<const int64_t> send_counts, void* out,
                 std::span<const int64_t> recv_counts, hvd::dtype t) override {
    activate();
    require_usable("alltoall");
    auto elem = size_of(t);
    call("ncclGroupStart", ncclGroupStart());
    size_t sent = 0, received = 0;
    for (size_t r = 0; r < send_counts.size(); ++r) {
      auto peer = static_cast<int>(r);
      auto sends = static_cast<size_t>(send_counts[r]);
      auto recvs = static_cast<size_t>(recv_counts[r]);
      if (sends > 0)
        call("ncclSend", ncclSend(static_cast<const char*>(in) + sent * elem, sends * elem,
                                  ncclUint8, peer, comm_, stream_));
      if (recvs > 0)
        call("ncclRecv", ncclRecv(static_cast<char*>(out) + received * elem, recvs * elem,
                                  ncclUint8, peer, comm_, stream_));
      sent += sends;
      received += recvs;
    }
    call("ncclGroupEnd", ncclGroupEnd());
  }

  void finish() override {
    settle("NCCL collective");
    wait_stream("NCCL collective", [this] { abort(); });
    settle("NCCL collective");
  }

  const char* name() const override {
    return "nccl";
  }

private:
  // A nonblocking communicator may answer ncclInProgress: wait until the
  // call took effect (bounded by the job's timeout) before the next one.
  void call(const char* what, ncclResult_t rc) {
    if (rc == ncclInProgress) {
      settle(what);
      return;
    }
    if (rc != ncclSuccess)
      broken_ = true;
    check(rc, what, topo_, device_);
  }

  void settle(const char* what) {
    if (!comm_)
      return;
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    poll_pause pause;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", topo_, device_);
      if (state == ncclSuccess)
        return;
      if (state != ncclInProgress) {
        broken_ = true;
        abort(); // NCCL: a communicator in error must be aborted
        check(state, what, topo_, device_);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        broken_ = true;
        abort();
        throw collective_error(fmt::format("{} on {} did not complete within {} ms: a peer "
                                           "rank died or never joined",
                                           what, where(topo_, device_), timeout_.count()));
      }
      pause();
    }
  }

  void abort() {
    if (comm_)
      ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  ncclComm_t comm_ = nullptr;
};

} // namespace

std::unique_ptr<backend> make_nccl_backend(const topology& t, int device, const ncclUniqueId& id,
                                           backend& host, std::chrono::milliseconds timeout) {
  return std::make_unique<nccl_backend>(t, device, id, host, timeout);
}

} // namespace hvactor::collectives::cuda
