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
#include <stdexcept>
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

/// Horovod's hvd.start_timeline: records every collective of this rank
/// from the next negotiation round on into `file_path` (HOROVOD_TIMELINE's
/// naming: "{rank}" in the path is replaced by the rank, else rank 0 writes
/// `file_path` and rank r `file_path.rank<r>`), with a CYCLE_START
/// mark at every round that has work when `mark_cycles`. A timeline already
/// running (HOROVOD_TIMELINE, or an earlier call) is closed first. Not a
/// collective: each rank starts its own; HOROVOD_TIMELINE=DYNAMIC (Horovod
/// requires it for this call) means "no file at init" and is not
/// required. Throws hvactor::error naming the file when it cannot be
/// written, not_started before init().
void start_timeline(const std::string& file_path, bool mark_cycles = false);

/// Horovod's hvd.stop_timeline: closes the running timeline (a complete
/// JSON file); nothing when none runs.
void stop_timeline();

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

// The type-erased operations behind the templates below. `shape`: the
// tensor's dimensions, when the caller has them (the LibTorch adapter):
// every rank must pass the same (Horovod's shape check); empty: [count].
void allreduce(void* data, size_t count, dtype t, op o, const std::string& name,
               scale_factors f = {}, std::span<const int64_t> shape = {});
std::vector<char> allgather(const void* data, size_t count, dtype t);
void allgather_into(const void* in, size_t count, void* out, size_t out_count, dtype t);
void broadcast(void* data, size_t count, dtype t, int root);
std::vector<char> alltoall(const void* data, size_t count, std::span<const int64_t> send_counts,
                           dtype t, std::vector<int64_t>* recv_counts);

template <class T>
std::vector<T> as_vector(const std::vector<char>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if constexpr (std::is_same_v<T, bool>) { // std::vector<bool> packs its bits
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = bytes[i] != 0;
  } else if (!out.empty()) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

struct pending_op;

} // namespace detail

/// Sums (or averages, ...) `x` element-wise across ranks, in place; `f`
/// scales the input before and the result after (Horovod's
/// prescale_factor / postscale_factor).
template <element T>
void allreduce(std::span<T> x, op o = op::average, scale_factors f = {}) {
  detail::allreduce(x.data(), x.size(), dtype_of<T>(), o, {}, f);
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
handle allreduce_async(void* data, size_t count, dtype t, op o, std::string name,
                       scale_factors f = {}, std::span<const int64_t> shape = {});
} // namespace detail

/// Queues an in-place allreduce of `x`; consecutive queued allreduces are
/// fused into one (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME). `name`
/// identifies the tensor across ranks (named tensors pair by name, in any
/// order) and in error messages; empty:
/// "allreduce.noname.<n>", paired by call order. A name of an operation
/// still in flight on this rank (submitted, not finished) throws
/// std::invalid_argument here, as Horovod's allreduce_async raises at the
/// call. `f` as allreduce().
template <element T>
handle allreduce_async(std::span<T> x, op o = op::average, std::string name = {},
                       scale_factors f = {}) {
  return detail::allreduce_async(x.data(), x.size(), dtype_of<T>(), o, std::move(name), f);
}

/// Waits until `h` finished; rethrows its error.
void synchronize(handle& h);

/// Allreduces every tensor of `xs` in place, fused like allreduce_async.
template <element T>
void grouped_allreduce(std::span<const std::span<T>> xs, op o = op::average,
                       scale_factors f = {}) {
  std::vector<handle> hs;
  hs.reserve(xs.size());
  for (auto& x : xs)
    hs.push_back(allreduce_async(x, o, {}, f));
  for (auto& h : hs)
    synchronize(h);
}

template <element T>
void grouped_allreduce(const std::vector<std::span<T>>& xs, op o = op::average,
                       scale_factors f = {}) {
  grouped_allreduce(std::span<const std::span<T>>(xs), o, f);
}

namespace detail {

/// An async collective's result (bytes) and, for alltoall, the counts
/// received from each rank.
struct async_result {
  std::vector<char> bytes;
  std::vector<int64_t> counts;
  /// What the queued call reads besides the caller's buffer (kept as long
  /// as the call may run, even when its handle is dropped).
  std::shared_ptr<void> keep_alive;
};

/// Rank r's element count in a reducescatter of `count` elements whose
/// rows hold `row` elements each (Horovod's split of the first dimension:
/// rows / size each, the first rows % size ranks one row more).
std::vector<size_t> reducescatter_counts(size_t count, size_t row, int ranks);

/// This rank's index and the number of ranks in the process set this
/// thread's calls run on (hvd_process_set.hpp; rank() and size() outside
/// a process_set_scope).
int set_rank();
int set_size();

void reducescatter(const void* in, size_t count, size_t row, void* out, dtype t, op o,
                   scale_factors f, const std::string& name);
handle reducescatter_async(const void* in, size_t count, size_t row, dtype t, op o,
                           scale_factors f, std::string name,
                           const std::shared_ptr<async_result>& result);
handle allgather_async(const void* data, size_t count, dtype t, std::string name,
                       const std::shared_ptr<async_result>& result);
handle broadcast_async(void* data, size_t count, dtype t, int root, std::string name,
                       std::shared_ptr<void> keep_alive = nullptr);
handle alltoall_async(const void* data, size_t count, std::span<const int64_t> send_counts,
                      dtype t, std::string name, const std::shared_ptr<async_result>& result);

} // namespace detail

/// An async collective that returns a new buffer (allgather_async,
/// reducescatter_async, alltoall_async): synchronize() it for the result.
/// Its input must stay alive and unchanged until then. Move-only.
template <element T>
class result_handle {
public:
  result_handle() = default;
  result_handle(handle h, std::shared_ptr<detail::async_result> r)
    : h_(std::move(h)), result_(std::move(r)) {
  }
  /// True once the operation finished (successfully or not).
  bool ready() const {
    return h_.ready();
  }
  /// The name it was submitted under ("allgather.noname.<n>" unnamed).
  const std::string& name() const {
    return h_.name();
  }
  handle h_;
  std::shared_ptr<detail::async_result> result_;
};

/// Waits for `h`, rethrows its error, and returns the result (once: the
/// handle is empty afterwards). `received_splits`, when given, gets the
/// element counts each rank sent here (alltoall_async; empty otherwise).
template <element T>
std::vector<std::remove_const_t<T>> synchronize(result_handle<T>& h,
                                                std::vector<int64_t>* received_splits = nullptr) {
  synchronize(h.h_);
  auto r = std::move(h.result_);
  if (!r)
    throw std::invalid_argument("hvd::synchronize: empty handle");
  if (received_splits)
    *received_splits = std::move(r->counts);
  return detail::as_vector<std::remove_const_t<T>>(r->bytes);
}

/// Horovod's reducescatter: reduces `x` (the same size on every rank)
/// across ranks with op::sum or op::average (other ops throw
/// std::invalid_argument, as Horovod's "Reducescatter currently only
/// supports AVERAGE and SUM") and returns this rank's part: of x.size()
/// elements, rank r gets x.size() / size() (+1 for the first
/// x.size() % size() ranks), in rank order. `f` as allreduce().
template <element T>
std::vector<std::remove_const_t<T>> reducescatter(std::span<T> x, op o = op::average,
                                                  scale_factors f = {}) {
  using U = std::remove_const_t<T>;
  auto counts = detail::reducescatter_counts(x.size(), 1, detail::set_size());
  std::vector<char> out(counts[static_cast<size_t>(detail::set_rank())] * sizeof(U));
  detail::reducescatter(x.data(), x.size(), 1, out.data(), dtype_of<U>(), o, f, {});
  return detail::as_vector<U>(out);
}

/// reducescatter queued: the result comes from synchronize(h). `name` as
/// allreduce_async's.
template <element T>
result_handle<T> reducescatter_async(std::span<T> x, op o = op::average, std::string name = {},
                                     scale_factors f = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::reducescatter_async(x.data(), x.size(), 1, dtype_of<std::remove_const_t<T>>(),
                                       o, f, std::move(name), r);
  return {std::move(h), std::move(r)};
}

/// reducescatter of every tensor of `xs`, negotiated together; the parts
/// in the order of `xs`.
template <element T>
std::vector<std::vector<std::remove_const_t<T>>>
grouped_reducescatter(const std::vector<std::span<T>>& xs, op o = op::average,
                      scale_factors f = {}) {
  std::vector<result_handle<T>> hs;
  for (auto& x : xs)
    hs.push_back(reducescatter_async(x, o, {}, f));
  std::vector<std::vector<std::remove_const_t<T>>> out;
  for (auto& h : hs)
    out.push_back(synchronize(h));
  return out;
}

/// allgather queued: every rank's `x` in rank order from synchronize(h).
template <element T>
result_handle<T> allgather_async(std::span<T> x, std::string name = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::allgather_async(x.data(), x.size(), dtype_of<std::remove_const_t<T>>(),
                                   std::move(name), r);
  return {std::move(h), std::move(r)};
}

/// allgather of every tensor of `xs`, negotiated together; the gathered
/// tensors in the order of `xs`.
template <element T>
std::vector<std::vector<std::remove_const_t<T>>>
grouped_allgather(const std::vector<std::span<T>>& xs) {
  std::vector<result_handle<T>> hs;
  for (auto& x : xs)
    hs.push_back(allgather_async(x));
  std::vector<std::vector<std::remove_const_t<T>>> out;
  for (auto& h : hs)
    out.push_back(synchronize(h));
  return out;
}

/// broadcast queued, in place (Horovod's broadcast_async_): `x` holds
/// root's values once synchronize(h) returned.
template <element T>
handle broadcast_async(std::span<T> x, int root, std::string name = {}) {
  return detail::broadcast_async(x.data(), x.size(), dtype_of<T>(), root, std::move(name));
}

/// alltoall queued (empty `send_counts`: size() equal parts); the parts
/// received from synchronize(h), their counts through its
/// received_splits.
template <element T>
result_handle<T> alltoall_async(std::span<T> x, std::span<const int64_t> send_counts = {},
                                std::string name = {}) {
  auto r = std::make_shared<detail::async_result>();
  auto h = detail::alltoall_async(x.data(), x.size(), send_counts,
                                  dtype_of<std::remove_const_t<T>>(), std::move(name), r);
  return {std::move(h), std::move(r)};
}

} // namespace hvactor::hvd

// Device memory (GPU builds; clear errors otherwise).
#include "hvactor/hvd_device.hpp"
// Process sets (Horovod's process_set= argument).
#include "hvactor/hvd_process_set.hpp"
