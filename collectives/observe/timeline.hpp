#pragma once

// Horovod's timeline (HOROVOD_TIMELINE): every collective of this rank as
// Chrome trace events (chrome://tracing, ui.perfetto.dev).
//
// Files. Each rank writes a file of its own, so that nothing has to travel
// between machines and a rank that dies takes only its own file with it:
//   - a path containing "{rank}" has every "{rank}" replaced by the rank
//     ("/tmp/tl.{rank}.json" -> "/tmp/tl.0.json", "/tmp/tl.1.json", ...);
//   - otherwise rank 0 writes the path itself and rank r > 0 writes
//     "<path>.rank<r>" ("tl.json", "tl.json.rank1", ...).
// Missing parent directories are created. A process that writes the same
// file again (hvd::init() after hvd::shutdown()) continues its array.
// merge_timelines() joins the ranks' files into one (the launcher does when
// they are all local).
//
// Format. A JSON array of trace events, one per line: "X" (complete)
// events, ts and dur in microseconds (ts: wall clock since the Unix epoch,
// so ranks on one machine line up exactly), and "M" metadata naming rows.
// pid = rank ("rank N (host)"); tid 0 = the operations in turn (NEGOTIATE,
// MEMCPY_IN_FUSION_BUFFER, <BACKEND>_<OP>, MEMCPY_OUT_FUSION_BUFFER; device
// backends' spans show when work was queued); tid 1, 2, ... = QUEUE, one
// span per batch or queued operation from its first submission (a second
// lane where a batch was queued before the previous one ran). close()
// ends the array; a process that dies leaves it open (Chrome, Perfetto
// accept that).
//
// Cost. record() copies a 128-byte event into a preallocated ring: no lock,
// allocation, formatting or I/O. A writer thread formats and appends what
// is there every flush interval (sooner when the ring is half full). A full
// ring drops events (counted; close() says how many) instead of waiting.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "collectives/observe/timeline_files.hpp" // timeline_files, merge_timelines
#include "hvactor/hvd_types.hpp"
#include "collectives/engine/operation.hpp"

namespace hvactor::collectives {

/// What a span measures.
enum class timeline_phase : uint8_t {
  /// From submission until the operation started to run.
  queue,
  /// The ranks agreeing on a batch's length (or on names, in negotiation).
  negotiate,
  memcpy_in,
  /// The backend's collective: "<BACKEND>_<OP>", e.g. GLOO_ALLREDUCE.
  op,
  memcpy_out,
  /// An instant: a negotiation cycle with work started
  /// (HOROVOD_TIMELINE_MARK_CYCLES; "CYCLE_START", as Horovod marks them).
  cycle,
};

/// One span, as recorded on the hot path: fixed size, no heap. An
/// operation's fields are kept typed; the writer thread renders them.
struct timeline_event {
  /// steady_clock, nanoseconds.
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  /// Payload bytes (this rank's); 0: none or unknown.
  uint64_t bytes = 0;
  /// Tensors in a batch of allreduces; 0: an operation of its own.
  uint32_t tensors = 0;
  /// Operations of their own: broadcast's root, allreduce's reduction.
  int32_t root = 0;
  hvd::op reduction = hvd::op::sum;
  /// Valid when has_type.
  hvd::dtype type = hvd::dtype::float32;
  uint16_t names_length = 0;
  timeline_phase phase = timeline_phase::op;
  op_kind op = op_kind::allreduce;
  bool has_type = false;
  bool failed = false;
  /// The operation ran on device memory.
  bool device = false;
  /// Set once a name did not fit: nothing more is appended.
  bool truncated = false;
  /// backend::name(), truncated.
  char backend[13] = {0};
  /// The tensors' names, comma-separated, or the operation's name;
  /// truncated with "..." (never inside a UTF-8 sequence).
  char names[67] = {0};

  void set_backend(const char* name) noexcept;
  /// Appends `name` (after a comma unless first) while there is room.
  void add_name(std::string_view name) noexcept;
  /// Takes an operation of its own; the writer renders it as describe(o).
  void set_operation(const operation& o) noexcept;
};

static_assert(sizeof(timeline_event) == 128, "one event per two cache lines");

/// The rank's timeline file for HOROVOD_TIMELINE=`pattern` (rule above).
std::string timeline_file(const std::string& pattern, int rank);

// merge_timelines() (public header): an input left unterminated by a crash
// loses at most its last, partial line.

/// `s` as the body of a JSON string: quotes, backslashes and control
/// characters escaped, bytes that are not UTF-8 replaced by U+FFFD.
std::string json_escape(std::string_view s);

/// json_escape(s) appended to `out`.
void json_escape_to(std::string& out, std::string_view s);

/// One rank's timeline file.
///
/// Threading: record() is called by one thread at a time; calls from
/// different threads must be ordered (the engine's mutex orders its
/// executing threads). close() and the destructor may be called from any
/// thread once recording stopped.
class timeline {
public:
  struct options {
    /// HOROVOD_TIMELINE.
    std::string pattern;
    int rank = 0;
    std::string host;
    std::chrono::milliseconds flush_interval{1000};
    /// Events the ring holds (rounded up to a power of two).
    size_t capacity = size_t{1} << 15;
  };

  /// Creates the file and writes the row names; throws hvactor::error
  /// naming the file when it cannot.
  explicit timeline(options opts);
  /// close().
  ~timeline();
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;

  /// steady_clock now, nanoseconds (the clock of timeline_event).
  static int64_t now() noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
  }

  /// Queues `e` as a `phase` span from `begin_ns` to `end_ns`.
  void record(const timeline_event& e, timeline_phase phase, int64_t begin_ns,
              int64_t end_ns) noexcept;

  /// Writes what is queued, closes the JSON array and the file. Idempotent.
  void close();

  /// The file written.
  const std::string& path() const noexcept {
    return path_;
  }

  /// Events dropped because the ring was full.
  uint64_t dropped() const noexcept {
    return dropped_.load(std::memory_order_relaxed);
  }

private:
  bool reopen_for_append();
  void writer_loop();
  void drain();
  void format(const timeline_event& e, std::string& out);
  int queue_lane(const timeline_event& e, std::string& out);

  options opts_;
  std::string path_;
  std::FILE* file_ = nullptr;
  bool file_was_closed_ = false;
  int64_t wall_offset_ns_ = 0;
  std::unique_ptr<timeline_event[]> ring_;
  uint64_t mask_ = 0;
  // Producer side.
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t tail_seen_ = 0;
  std::atomic<uint64_t> dropped_{0};
  // Consumer side.
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::vector<int64_t> lanes_;
  uint64_t written_ = 0;
  std::string text_;
  // An operation of its own, rebuilt from its event for describe_to().
  operation op_;
  std::string op_text_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool closed_ = false;
  std::atomic<bool> nudge_{false};
  std::thread writer_;
};

} // namespace hvactor::collectives
