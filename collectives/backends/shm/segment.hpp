#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hvactor::collectives::shm {

/// Why a segment's abort word was raised.
enum class abort_reason : uint32_t {
  none = 0,
  /// The colocator reaped the process (it died or exited).
  exited = 1,
  /// The rank's own collective failed (a peer on another node died, a
  /// timeout); it left the local group.
  failed = 2,
};

/// One rank's words for the steps of one set (steps s with s % 2 == set):
/// written only by that rank, read by the others; a cache line of its own.
/// A waiter for step s reads its peers' line of set s % 2 only, and a rank
/// writes that line again at step s + 2, after every peer is done with
/// step s: a rank that moves on to the next step does not take the line
/// its slower peers still read (with one line for both sets, a small call
/// moved it between the cores once more).
struct alignas(64) rank_words {
  /// The last step of this set whose data this rank has put into its slot.
  std::atomic<uint32_t> posted{0};
  /// The last step of this set whose reduced slice this rank has published.
  std::atomic<uint32_t> reduced{0};
  /// 1 + the CPU this rank last waited on (0: not yet; set 0's line only):
  /// a waiter that finds its peer on its own CPU yields to it instead of
  /// spinning.
  std::atomic<uint32_t> cpu{0};
  /// What this rank said with its post of the step (written before
  /// `posted`, read after waiting for it). loaded: 1 while this rank's
  /// waits take the loaded strategy, 2 when besides its waits at its last
  /// step stalled (every rank reads the same words, and so chooses the
  /// same next chunk: communicator::chunk_after). offset: where its data starts in its
  /// slot, 0-63 bytes in: its buffer's offset from a cache line, so that
  /// the copies between buffers and slots move whole lines when the ranks'
  /// buffers share their offset (a std::vector of 128 KiB or more starts
  /// 16 bytes past a page; a copy between it and a line-aligned slot takes
  /// 1.6x as long).
  uint8_t loaded = 0;
  uint8_t offset = 0;
  /// A solo round's exchange (communicator::allreduce_with_header): a
  /// digest of this rank's header and its step (0: the step sent none),
  /// and data of up to inline_bytes. Written before `posted`, in the line
  /// a waiter reads anyway: when every digest matches, a small call reads
  /// no other line of its peers.
  uint64_t digest = 0;
  static constexpr size_t inline_bytes = 32;
  alignas(16) std::byte inline_data[inline_bytes] = {};
};
static_assert(sizeof(rank_words) == 64, "a rank's words of a set are one cache line");

/// How many ranks sleep on a rank's words (written by the sleepers); the
/// owner wakes the futex only when someone sleeps.
struct alignas(64) rank_sleepers {
  std::atomic<uint32_t> posted{0};
  std::atomic<uint32_t> reduced{0};
};

/// The segment's first bytes.
struct alignas(64) segment_header {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t slots = 0;
  uint64_t slot_bytes = 0;
  /// Random, so that ranks can tell whether they got the same segment.
  uint64_t id = 0;
  uint64_t total_bytes = 0;
  /// Raised by the colocator (a worker died) or by a failing rank: the pid
  /// of the process that left, then the reason; both futex words.
  alignas(64) std::atomic<uint32_t> abort_pid{0};
  std::atomic<uint32_t> abort_why{0};
};

/// A node's shared memory for the collectives of one job's ranks there: a
/// header, the ranks' sequence words, and two sets of one data slot per
/// rank. The colocator creates it (an anonymous memfd: no name in
/// /dev/shm, nothing left behind whoever dies) and hands its descriptor to
/// the workers it starts (HVACTOR_SHM_FD); the memory goes away with the
/// last process that maps it. Thread-safe: the words are atomics.
class segment {
public:
  /// A new segment for `slots` ranks, `slot_bytes` per slot (rounded up to
  /// a page). Throws hvactor::error naming the failing call.
  static std::shared_ptr<segment> create(uint32_t slots, size_t slot_bytes);

  /// Maps the segment behind `fd` (not taken over); throws hvactor::error
  /// when it is not one (size, magic, version or layout do not match).
  static std::shared_ptr<segment> attach(int fd);

  ~segment();
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;

  /// The memfd (create()) or -1 (attach()).
  int fd() const noexcept {
    return fd_;
  }

  segment_header& header() const noexcept {
    return *static_cast<segment_header*>(base_);
  }

  /// Local rank `slot`'s words for the steps of set `set` (0 or 1).
  rank_words& words(int slot, int set) const noexcept;
  rank_sleepers& sleepers(int slot) const noexcept;

  /// Slot `slot` of set `set` (0 or 1).
  std::byte* data(int set, int slot) const noexcept;

  /// Raises the abort word for `pid` and wakes every sleeper. Called by
  /// the colocator when it reaped a worker, and by a rank that failed.
  void raise_abort(pid_t pid, abort_reason why) noexcept;

  /// Wakes every rank sleeping on a word of this segment.
  void wake_all() noexcept;

private:
  segment(void* base, size_t bytes, int fd) : base_(base), bytes_(bytes), fd_(fd) {
  }

  void* base_;
  size_t bytes_;
  int fd_;
};

/// Bytes of a segment for `slots` ranks of `slot_bytes` each (page-rounded).
size_t segment_bytes(uint32_t slots, size_t slot_bytes);

/// futex(2) on a word of a shared mapping: wait while *word == expected,
/// at most `timeout_ns`; wake up to `n` waiters.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, int64_t timeout_ns) noexcept;
void futex_wake(std::atomic<uint32_t>& word, int n) noexcept;

} // namespace hvactor::collectives::shm
