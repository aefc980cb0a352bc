#pragma once

/// Horovod's process sets: collectives over a subset of the job's ranks.
///
///   hvd::process_set even({0, 2}), odd({1, 3});
///   hvd::init({&even, &odd});                 // static sets, created at init
///   if (even.included()) hvd::allreduce(even, std::span(grad));
///
///   // HOROVOD_DYNAMIC_PROCESS_SETS=1 (or init({}, true)):
///   auto ps = hvd::add_process_set({0, 1});   // every rank calls it
///   hvd::remove_process_set(ps);              // every rank calls it
///
/// Each set has its own negotiation (its own engine and background
/// thread), its own Gloo context and, on a node where several of its ranks
/// run, its own shared-memory segment: sets run their collectives
/// concurrently and independently. Ranks are always the job's (global)
/// ranks, as in Horovod: a broadcast's root is a global rank of the set;
/// allgather and alltoall order their parts by the members' order in
/// ranks(). A rank that is not a member calling a set's collective gets
/// std::invalid_argument naming the set; a member that dies fails the
/// set's collectives on its other members (and the job's, as its next
/// round notices).

#include <string>
#include <vector>

#include "hvactor/hvd_collectives.hpp"

namespace hvactor::hvd {

/// A set of the job's ranks (Horovod's hvd.ProcessSet). Built from ranks
/// (sorted), it gets its id from init() or add_process_set(); a copy is a
/// second name for the same set.
class process_set {
public:
  process_set() = default;
  /// Sorted; duplicates and negative ranks are refused when it is added.
  explicit process_set(std::vector<int> ranks);

  /// 0 for the global set; -1 until added (or after removal).
  int id() const noexcept {
    return id_;
  }
  const std::vector<int>& ranks() const noexcept {
    return ranks_;
  }
  /// Number of ranks in the set.
  int size() const noexcept {
    return static_cast<int>(ranks_.size());
  }
  /// This process's index in ranks() (Horovod's process_set.rank()); -1
  /// when it is not a member. Throws not_started before hvd::init().
  int rank() const;
  bool included() const;
  /// "process set 1 (ranks 0, 2)".
  std::string to_string() const;

private:
  friend struct process_set_access;
  int id_ = -1;
  std::vector<int> ranks_;
};

/// The set of all ranks (id 0); its ranks are filled in by hvd::init().
process_set global_process_set();

/// hvd::init() that also creates `process_sets` (Horovod's
/// hvd.init(process_sets=[...])): each gets its id. A collective over every
/// rank: each passes the same sets in the same order. `dynamic` allows
/// add_process_set()/remove_process_set() later, as
/// HOROVOD_DYNAMIC_PROCESS_SETS=1 does. Not in elastic jobs.
void init(const std::vector<process_set*>& process_sets, bool dynamic = false);

/// Adds a set of these ranks and returns it (Horovod's
/// hvd.add_process_set); every rank of the job calls it with the same
/// ranks. Requires HOROVOD_DYNAMIC_PROCESS_SETS=1 (or init(sets, true)).
/// std::invalid_argument for ranks that are empty, out of range,
/// duplicated, differ between ranks, or already form a set: the same on
/// every rank (decided after one exchange, before anything changes).
process_set add_process_set(std::vector<int> ranks);
process_set add_process_set(const process_set& ranks);

/// Removes `ps` once every rank called this (its members first finish
/// what they queued on it) and invalidates it (id -1). False, without a
/// collective, for the global set or a set not added (id 0 or -1); false
/// where some rank no longer had it. std::invalid_argument on every rank
/// when the ranks passed different sets.
bool remove_process_set(process_set& ps);

/// Every set of the job (the global one first), as added.
std::vector<process_set> process_sets();

/// Runs every hvd call of this thread on `ps` until it goes out of scope
/// (nests; the torch adapter's calls included): how the overloads below
/// work, and how any other call takes a process set.
class process_set_scope {
public:
  explicit process_set_scope(const process_set& ps);
  ~process_set_scope();
  process_set_scope(const process_set_scope&) = delete;
  process_set_scope& operator=(const process_set_scope&) = delete;

private:
  int previous_;
};

/// The set this thread's hvd calls run on (the global one outside a
/// process_set_scope).
process_set current_process_set();

// Horovod's `process_set=` argument: the same calls, on `ps`.

template <element T>
void allreduce(const process_set& ps, std::span<T> x, op o = op::average, scale_factors f = {}) {
  process_set_scope on{ps};
  allreduce(x, o, f);
}

template <element T>
handle allreduce_async(const process_set& ps, std::span<T> x, op o = op::average,
                       std::string name = {}, scale_factors f = {}) {
  process_set_scope on{ps};
  return allreduce_async(x, o, std::move(name), f);
}

template <element T>
void grouped_allreduce(const process_set& ps, const std::vector<std::span<T>>& xs,
                       op o = op::average, scale_factors f = {}) {
  process_set_scope on{ps};
  grouped_allreduce(xs, o, f);
}

template <element T>
std::vector<std::remove_const_t<T>> allgather(const process_set& ps, std::span<T> x) {
  process_set_scope on{ps};
  return allgather(x);
}

/// `root` is a global rank, a member of `ps`.
template <element T>
void broadcast(const process_set& ps, std::span<T> x, int root) {
  process_set_scope on{ps};
  broadcast(x, root);
}

template <element T>
std::vector<std::remove_const_t<T>> alltoall(const process_set& ps, std::span<T> x) {
  process_set_scope on{ps};
  return alltoall(x);
}

template <element T>
std::vector<std::remove_const_t<T>> alltoall(const process_set& ps, std::span<T> x,
                                             std::span<const int64_t> send_counts,
                                             std::vector<int64_t>* recv_counts = nullptr) {
  process_set_scope on{ps};
  return alltoall(x, send_counts, recv_counts);
}

template <element T>
std::vector<std::remove_const_t<T>> reducescatter(const process_set& ps, std::span<T> x,
                                                  op o = op::average, scale_factors f = {}) {
  process_set_scope on{ps};
  return reducescatter(x, o, f);
}

void barrier(const process_set& ps);

} // namespace hvactor::hvd
