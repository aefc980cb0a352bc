#pragma once

/// The core of Horovod's `hvd` for C++ (hvactor/hvd.hpp includes every
/// family): joining and leaving the job's collectives, the timeline, the
/// ranks, barrier and join, and the handles of async calls.

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "hvactor/hvd_types.hpp"

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
/// its shared-memory segment, 8 MiB slots)"; "hierarchical" across nodes;
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

/// Waits until `h` finished; rethrows its error.
void synchronize(handle& h);

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
/// This rank's index and the number of ranks in the process set this
/// thread's calls run on (hvd_process_set.hpp; rank() and size() outside
/// a process_set_scope).
int set_rank();
int set_size();

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

} // namespace hvactor::hvd
