#pragma once

/// Horovod's `hvd` for C++ buffers: `namespace hvd = hvactor::hvd;`
///
/// Every collective is called by every rank (as with Horovod). Named async
/// allreduces pair by name, in any order per rank; unnamed calls pair by
/// call order ("allreduce.noname.<n>"). Calls block the calling thread,
/// except `allreduce_async`, whose handle `synchronize` waits for. A live
/// peer that is late is waited for (HOROVOD_STALL_CHECK_TIME_SECONDS warns
/// about it); errors are hvactor errors (hvactor/errors.hpp): a peer that
/// died fails the call on every surviving rank, after which the
/// collectives stay unusable until shutdown() + init().

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvactor/collectives/types.hpp"

namespace hvactor::hvd {

/// Joins the job's collectives: reads HOROVOD_RANK/SIZE/... and the
/// rendezvous address from the environment the coordinator (or hvactor-run)
/// handed out and connects the ranks. Without that environment the process
/// is a job of its own: size 1, rank 0. Idempotent.
void init();

/// Waits for queued operations, then closes the connections. init() may be
/// called again afterwards (elastic jobs do).
void shutdown();

bool is_initialized();

/// Which path each host operation takes, e.g. "allreduce: shm, allgather:
/// shm, broadcast: shm, barrier: shm, alltoall: gloo (2 ranks on n1 share
/// its shared-memory segment, 2 MiB slots)"; "hierarchical" across nodes;
/// "gloo" with the reason when neither applies. Throws not_started before
/// init().
std::string backend_info();

int rank();
int size();
/// Index of this rank among the ranks on its node.
int local_rank();
int local_size();
/// Index of this rank's node among the nodes with a rank of this local rank.
int cross_rank();
int cross_size();

namespace detail {

// The type-erased operations behind the templates below.
void allreduce(void* data, size_t count, dtype t, op o, const std::string& name);
std::vector<char> allgather(const void* data, size_t count, dtype t);
void allgather_into(const void* in, size_t count, void* out, size_t out_count, dtype t);
void broadcast(void* data, size_t count, dtype t, int root);
std::vector<char> alltoall(const void* data, size_t count, std::span<const int64_t> send_counts,
                           dtype t, std::vector<int64_t>* recv_counts);

template <class T>
std::vector<T> as_vector(const std::vector<char>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

struct pending_op;

} // namespace detail

/// Sums (or averages, ...) `x` element-wise across ranks, in place.
template <element T>
void allreduce(std::span<T> x, op o = op::average) {
  detail::allreduce(x.data(), x.size(), dtype_of<T>(), o, {});
}

/// Every rank's `x`, concatenated in rank order. Sizes may differ per rank.
template <element T>
std::vector<std::remove_const_t<T>> allgather(std::span<T> x) {
  using U = std::remove_const_t<T>;
  return detail::as_vector<U>(detail::allgather(x.data(), x.size(), dtype_of<U>()));
}

/// Every rank's `in` into `out`, in rank order, without allocating (as
/// MPI_Allgather): every rank passes the same in.size(), and out holds
/// size() x in.size() elements; std::invalid_argument otherwise (on every
/// rank, when the ranks' sizes differ).
template <element T>
void allgather(std::span<const T> in, std::span<T> out) {
  detail::allgather_into(in.data(), in.size(), out.data(), out.size(), dtype_of<T>());
}

/// Overwrites `x` on every rank with root's `x` (equal sizes on all ranks).
template <element T>
void broadcast(std::span<T> x, int root) {
  detail::broadcast(x.data(), x.size(), dtype_of<T>(), root);
}

/// Returns once every rank called barrier().
void barrier();

/// Horovod's join, for ranks with uneven amounts of data: a rank that ran
/// out calls join(), which returns once every rank called it. Until then the
/// joined rank takes part in the other ranks' allreduces with zeros (so
/// op::average still divides by size(): Horovod's semantics) and in their
/// barriers; an allgather, broadcast or alltoall, or a GPU tensor, fails on
/// the other ranks with a collective_error ("... is not supported with Join
/// at this time"). Returns the same rank on every rank: the one that joined
/// last (the highest of those that joined in the same negotiation round).
int join();

/// Sends the i-th of size() equal parts of `x` to rank i; returns the parts
/// received, in rank order. x.size() must be a multiple of size().
template <element T>
std::vector<std::remove_const_t<T>> alltoall(std::span<T> x) {
  using U = std::remove_const_t<T>;
  std::vector<int64_t> counts;
  return detail::as_vector<U>(detail::alltoall(x.data(), x.size(), counts, dtype_of<U>(), nullptr));
}

/// Sends `send_counts[i]` consecutive elements of `x` to rank i; returns what
/// every rank sent to this one, in rank order, and their counts in
/// `recv_counts` when given.
template <element T>
std::vector<std::remove_const_t<T>> alltoall(std::span<T> x, std::span<const int64_t> send_counts,
                                             std::vector<int64_t>* recv_counts = nullptr) {
  using U = std::remove_const_t<T>;
  return detail::as_vector<U>(detail::alltoall(x.data(), x.size(), send_counts, dtype_of<U>(),
                                                recv_counts));
}

/// An allreduce in flight. Move-only; synchronize() it before the buffer is
/// read or freed.
class handle {
public:
  handle() = default;
  handle(handle&&) noexcept = default;
  handle& operator=(handle&&) noexcept = default;
  ~handle();
  /// True once the operation finished (successfully or not).
  bool ready() const;
  /// The name it was submitted under.
  const std::string& name() const;
  explicit handle(std::shared_ptr<detail::pending_op> op) : op_(std::move(op)) {
  }
  std::shared_ptr<detail::pending_op> op_;
};

namespace detail {
handle allreduce_async(void* data, size_t count, dtype t, op o, std::string name);
} // namespace detail

/// Queues an in-place allreduce of `x`; consecutive queued allreduces are
/// fused into one (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME). `name`
/// identifies the tensor in error messages and in the HOROVOD_DEBUG_NAMES
/// check; empty: "allreduce.<n>".
template <element T>
handle allreduce_async(std::span<T> x, op o = op::average, std::string name = {}) {
  return detail::allreduce_async(x.data(), x.size(), dtype_of<T>(), o, std::move(name));
}

/// Waits until `h` finished; rethrows its error.
void synchronize(handle& h);

/// Allreduces every tensor of `xs` in place, fused like allreduce_async.
template <element T>
void grouped_allreduce(std::span<const std::span<T>> xs, op o = op::average) {
  std::vector<handle> hs;
  hs.reserve(xs.size());
  for (auto& x : xs)
    hs.push_back(allreduce_async(x, o));
  for (auto& h : hs)
    synchronize(h);
}

template <element T>
void grouped_allreduce(const std::vector<std::span<T>>& xs, op o = op::average) {
  grouped_allreduce(std::span<const std::span<T>>(xs), o);
}

} // namespace hvactor::hvd

// Device memory (GPU builds; clear errors otherwise).
#include "hvactor/hvd_device.hpp"
