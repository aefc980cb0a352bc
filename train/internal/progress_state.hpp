#pragma once

// Internal: the state of the driver's train_progress actor
// (internal/train_progress.hpp, train_progress.cpp): the report being
// collected, rank 0's checkpoint as it arrives (internal/transfer.hpp),
// the reports that came early and what ended the attempt.

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "train/internal/transfer.hpp"
#include "train/internal/train_progress.hpp"

namespace hvactor::train::progress {

namespace fs = std::filesystem;

struct progress_state {
  progress_config cfg;
  /// The report being collected, its ranks' metrics and waiting answers.
  uint64_t next = 0;
  std::map<int32_t, std::vector<char>> metrics;
  std::map<int32_t, caf::typed_response_promise<std::string>> answers;
  /// Rank 0's report of `next` says it handed over a checkpoint.
  bool with_checkpoint = false;
  /// Rank 0's checkpoint of report `next`, copied (tr_local) or arriving
  /// on the data link (tr_upload) into a hidden directory of its own; when
  /// the report completes it becomes `partial`, then the checkpoint.
  std::shared_ptr<upload_slot> upload;
  fs::path partial;
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
    if (!partial.empty()) {
      std::error_code ec;
      fs::remove_all(partial, ec);
      partial.clear();
    }
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

} // namespace hvactor::train::progress
