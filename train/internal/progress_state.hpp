#pragma once

// Internal: the state of the driver's train_progress actor
// (internal/train_progress.hpp), shared by its two halves: the reports
// (train_progress.cpp) and the bytes it takes and gives, checkpoints,
// shards and the resume checkpoint (progress_transfers.cpp).

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "base/internal/knobs.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/data_route.hpp"
#include "train/internal/train_progress.hpp"

namespace hvactor::train::progress {

namespace fs = std::filesystem;

// A checkpoint's chunks, at most: as many as the store accepts for a
// chunked value (get_stream).
constexpr uint32_t max_chunks = knobs::max_message_bytes / knobs::ship_chunk_bytes * 64;

struct progress_state {
  progress_config cfg;
  /// The resume checkpoint's stream per rank that asks for it, and the
  /// chunk it is at.
  std::map<int32_t, std::pair<std::unique_ptr<checkpoint_source>, uint32_t>> resumes;
  /// The report being collected, its ranks' metrics and waiting answers.
  uint64_t next = 0;
  std::map<int32_t, std::vector<char>> metrics;
  std::map<int32_t, caf::typed_response_promise<std::string>> answers;
  uint32_t chunk_count = 0;
  /// Rank 0's checkpoint of report `next` as it streams in: written under
  /// `partial` chunk by chunk (chunks_fed so far), or why it was refused.
  std::unique_ptr<checkpoint_sink> sink;
  fs::path partial;
  uint32_t chunks_fed = 0;
  std::string sink_error;
  /// The checkpoint came by tr_local and was copied whole.
  bool copied = false;
  /// The checkpoint comes on the data link (tr_upload).
  std::shared_ptr<upload_slot> upload;
  /// Checkpoints past num_to_keep, renamed, to remove after the answers.
  std::vector<fs::path> doomed;

  void remove_doomed() {
    std::error_code ec;
    for (auto& p : doomed)
      fs::remove_all(p, ec);
    doomed.clear();
  }
  /// Report `next`, complete and persisted, until the trainer takes it.
  std::optional<train_event> complete;
  /// The report handed over last: a trainer whose wait timed out as it
  /// was answered asks for it again.
  std::optional<train_event> last;
  /// The trainer's waiting tr_await, if any.
  std::optional<caf::typed_response_promise<train_event>> awaiting;
  /// Reports without a checkpoint that came ahead of their turn (index >
  /// next, or next while it waits for the trainer), by index and rank,
  /// with their answers; bytes of metrics per rank.
  std::map<uint64_t, std::map<int32_t, std::pair<std::vector<char>,
                                                caf::typed_response_promise<std::string>>>>
    early;
  std::map<int32_t, size_t> early_bytes;
  /// Ranks whose loop returned, with their report counts.
  std::map<int32_t, uint64_t> done;
  /// What ended the attempt (kind rank_failed or failed), once known.
  std::optional<train_event> end;
  static inline const char* name = "train_progress";

  /// Drops a checkpoint that did not complete: nothing of it stays.
  void drop_partial() {
    sink.reset();
    if (!partial.empty()) {
      std::error_code ec;
      fs::remove_all(partial, ec);
      partial.clear();
    }
    chunks_fed = 0;
    copied = false;
    if (upload)
      upload->cancel();
    upload.reset();
  }

  /// Names the partial directory of the next checkpoint (not made yet).
  void open_partial() {
    drop_partial();
    partial = cfg.run_dir / (".partial_" + checkpoint_dir_name(next_checkpoint_index(cfg.run_dir)));
    std::error_code ec;
    fs::remove_all(partial, ec);
  }

  ~progress_state() {
    drop_partial();
    remove_doomed();
  }
};

using progress_actor = train_progress::stateful_pointer<progress_state>;

/// An error for a refused report or transfer: "train::report: " + what.
caf::error refused(const std::string& what);

/// The sender is rank 0's process (unit tests give no workers: anyone).
bool from_rank0(progress_actor self);

/// The transfers' handlers (progress_transfers.cpp).
caf::result<bool> on_chunk(progress_actor self, train_chunk& c);
caf::result<bool> on_local(progress_actor self, uint64_t index, const std::string& dir);
caf::result<std::string> on_upload(progress_actor self, uint64_t index);
caf::result<uint64_t, std::vector<char>> on_piece(progress_actor self, uint32_t dataset,
                                                 int32_t rank, uint64_t offset);
caf::result<std::vector<char>> on_resume(progress_actor self, int32_t rank, uint32_t no);
caf::result<std::string> on_fetch_shard(progress_actor self, uint32_t dataset, int32_t rank);
caf::result<std::string> on_fetch_resume(progress_actor self, int32_t rank);

} // namespace hvactor::train::progress
