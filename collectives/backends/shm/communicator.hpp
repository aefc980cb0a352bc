#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hvactor/hvd_types.hpp"
#include "collectives/backends/shm/parts_view.hpp"
#include "collectives/backends/shm/segment.hpp"

namespace hvactor::collectives::shm {

class cpu_pin;

/// Whether a rank's step word `value` has reached `step` (the counters
/// wrap around).
inline bool reached(uint32_t value, uint32_t step) {
  return static_cast<int32_t>(value - step) >= 0;
}

/// The ranks of one job on one node that share a segment.
struct local_group {
  /// This rank's index in the group (its slot), and the group's size.
  int local_rank = 0;
  int local_size = 1;
  /// World rank and pid of each local rank, by local rank.
  std::vector<int> ranks;
  std::vector<pid_t> pids;
  /// This rank's world rank and the world size, for messages.
  int rank = 0;
  int size = 1;
  std::string host;
};

/// Collectives among the ranks of one node through their segment: no
/// syscall on the data path, one sequence word per rank and step.
///
/// Protocol. Every step s (counted from 1 on every rank; steps never
/// overlap) uses data set s % 2. A rank writes its slot of that set (its
/// data starting at its buffer's offset from a cache line, said in its
/// words: rank_words::offset), then publishes `posted = s`; whoever needs
/// its data waits for that. Allreduce
/// steps also publish `reduced = s` once the rank's slice is reduced. Every
/// step waits until every rank posted s, and a rank posts s only after it
/// finished reading step s - 1: so when a rank writes set s % 2 at step s,
/// everyone has finished step s - 2, the last reader of that set.
///
/// Waiting: spin on the awaited word, then sleep on its futex, waking every
/// knobs::shm_sleep_slice to look at the abort word and whether the awaited
/// process still exists. How long to spin depends on whether other threads
/// compete for this rank's core, which the waiter sees for itself: a gap
/// between two of its clock reads longer than knobs::shm_preempted (or a
/// sched_yield that long, unless another local rank moved on meanwhile)
/// means the core went to another thread meanwhile.
///   - Quiet (no such gap within knobs::shm_load_memory): spin for spin_
///     (adaptive), yielding instead of pausing when there are more local
///     ranks than cores (the awaited rank may need this core); then sleep.
///   - Loaded: spin knobs::shm_spin_loaded_apart (shm_spin_loaded with
///     more local ranks than cores; shm_spin_loaded_bulk in an allreduce of
///     shm_long_wait_bytes or more, whose sleeps are not pinned), then
///     sleep, with more local ranks than cores too: there a
///     quiet waiter yields, and when no local rank moved on for 200 us
///     meanwhile it moves to the CPU of the rank it waits for
///     (join_cpu_of: its yields there let that rank run); no local rank
///     moving on for shm_starved_oversubscribed (outside an allreduce of
///     2 MiB or more, bulk_) says loaded too. A rank
///     that spins or yields while its peer waits for a core spends its own
///     share of the core, and the scheduler then makes it wait its turn
///     behind the busy threads each step (the kernel's sched_yield even
///     moves it to the back); one that sleeps keeps its share and runs as
///     soon as it is woken. Pinned to distinct cores (hvd's bind_to), two loaded ranks
///     then mostly run at the same time.
/// A raised abort word naming a local rank, or the timeout, throws
/// collective_error naming the rank; after a failure the communicator
/// refuses further work.
///
/// Threading: one call at a time (the engine's order).
class communicator {
public:
  communicator(std::shared_ptr<segment> seg, local_group group,
               std::chrono::milliseconds timeout);

  /// Zeroes the group's sequence words and the abort word (local rank 0,
  /// while every local rank is inside hvd::init and none in a step).
  void reset();

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o);

  /// Allreduces the concatenation of `parts` in place, copying each part
  /// in and out itself (a fused batch without a fusion buffer).
  void allreduce(std::span<const buffer_part> parts, hvd::dtype t, hvd::op o);

  /// backend::allreduce_with_header in one step: false (nothing done) when
  /// the header and the data do not fit the one-step path together.
  bool allreduce_with_header(int64_t* header, size_t words, size_t data_word, void* data,
                             size_t count, hvd::dtype t, hvd::op o,
                             const std::function<bool(std::span<const int64_t>)>& accept);

  /// The elements of `data` that local rank k owns in slice(count, t, k).
  struct range {
    size_t begin = 0;
    size_t count = 0;
  };
  range slice(size_t count, hvd::dtype t, int k) const;

  /// Leaves this rank's slice of `data` (slice(count, t, local_rank))
  /// reduced over the local ranks; the rest of `data` is scratch.
  void reduce_scatter(void* data, size_t count, hvd::dtype t, hvd::op o);

  /// The same with the slices given: local rank k's is parts[k] (the same
  /// on every local rank; they may be empty and need not be aligned), e.g.
  /// Horovod's reducescatter split.
  void reduce_scatter(void* data, std::span<const range> parts, hvd::dtype t, hvd::op o);

  /// Every rank's slice of `data` to every rank (after reduce_scatter and
  /// whatever each did to its slice: the hierarchical allreduce).
  void allgather_slices(void* data, size_t count, hvd::dtype t);

  /// Local rank k's `bytes[k]` bytes (this rank's from `in`) land at
  /// out + offsets[k], for every k.
  void allgatherv(const void* in, void* out, std::span<const size_t> bytes,
                  std::span<const size_t> offsets);

  /// Local rank `root`'s `bytes` to every local rank.
  void broadcast(void* data, size_t bytes, int root);

  void barrier();

  /// Marks this rank as gone (its collective failed): every local peer
  /// fails its current and next step at once.
  void leave() noexcept;

  const local_group& group() const noexcept {
    return group_;
  }

  size_t slot_bytes() const noexcept {
    return slot_bytes_;
  }

private:
  enum class word { posted, reduced };

  uint32_t next_step();
  void publish(word w, uint32_t step);
  void wake_sleepers();
  void wait_all(word w, uint32_t step, const char* what);
  void wait_one(int k, word w, uint32_t step, const char* what);
  bool spin_for(std::atomic<uint32_t>& value, uint32_t step,
                std::chrono::steady_clock::time_point start, std::chrono::nanoseconds budget,
                bool yielding, const char* what, int k);
  void check_peer(int k, bool look_up, std::chrono::steady_clock::time_point deadline,
                  const char* what);
  void join_cpu_of(int k);
  int note_cpu();
  void saw_preemption(std::chrono::steady_clock::time_point now);
  bool shares_cpu_with(int k);
  void sleep_apart(std::optional<cpu_pin>& pin);
  uint32_t progress() const;
  void check_abort(const char* what);
  [[noreturn]] void fail(const std::string& msg, int peer_local);
  void allreduce_one_step(size_t count, hvd::dtype t, hvd::op o);
  size_t chunk_after(int set) const;
  std::byte* my_data(int set, size_t offset);
  const std::byte* data_of(int set, int k) const;

  std::shared_ptr<segment> seg_;
  local_group group_;
  std::chrono::milliseconds timeout_;
  size_t slot_bytes_;
  /// What a step may put into a slot: a line less than the slot (the data
  /// starts up to a line in: rank_words::offset).
  size_t room_;
  /// min(room_, knobs::shm_chunk_bytes): the chunk of a quiet step.
  size_t chunk_bytes_;
  /// min(room_, knobs::shm_loaded_chunk_bytes): the chunk after a loaded one.
  size_t loaded_chunk_bytes_;
  bool oversubscribed_;
  /// How long a quiet wait spins before it sleeps: knobs::shm_spin, raised
  /// (up to knobs::shm_spin_max) after a short wait that had to sleep, so
  /// that two ranks do not settle into waking each other late, every step
  /// then costing a wake-up; lowered again while waits end in the spin.
  std::chrono::nanoseconds spin_;
  /// When shares_cpu_with() last moved this rank off a CPU it shared.
  std::chrono::steady_clock::time_point last_move_{};
  /// Waits take the loaded strategy until then (a wait saw this thread
  /// lose its core; see the class comment).
  std::chrono::steady_clock::time_point loaded_until_{};
  /// Until then a wait with more local ranks than cores does not yield: a
  /// yield lost the core for knobs::shm_yield_lost (see wait_one).
  std::chrono::steady_clock::time_point yields_lost_until_{};
  /// In an allreduce of knobs::shm_short_slice_bytes or more: steps that
  /// may keep every local rank still for a while on a quiet machine.
  bool bulk_ = false;
  /// In an allreduce of knobs::shm_long_wait_bytes or more.
  bool long_waits_ = false;
  uint32_t step_ = 0;
  /// The word publish() stored last and its sleepers' count, until
  /// wake_sleepers() looked at them (nullptr: nothing to look at).
  std::atomic<uint32_t>* unwoken_ = nullptr;
  std::atomic<uint32_t>* unwoken_sleepers_ = nullptr;
  /// The buffers of the allreduce in progress.
  parts_view view_;
  /// The one-step path's result when the buffers are several.
  std::vector<std::byte> small_;
  std::string broken_;
  /// An abort pid already seen that is not a member (an earlier job
  /// generation's worker): ignored without a lookup.
  uint32_t foreign_abort_ = 0;
};

} // namespace hvactor::collectives::shm
