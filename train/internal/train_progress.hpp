#pragma once

// Internal: how hvactor::train's workers report to the driver. The driver
// runs one `train_progress` actor per attempt (detached: it writes
// checkpoints to disk) and publishes it beside the job's store; workers
// reach it on the store's host at train_spec::progress_port, through their
// process's one actor system.
//
//  1. Each rank sends `tr_report(train_report)` for report i = 0, 1, ... and
//     waits for the answer; rank 0 first hands over its checkpoint
//     (internal/transfer.hpp): on the driver's own machine `tr_local` with
//     the directory's path, which the actor copies, elsewhere as a
//     checkpoint stream on the driver's data link (`tr_upload` gives the
//     ticket).
//  2. Once every rank reported i, the actor persists rank 0's checkpoint
//     under the run's directory and holds the answers until the trainer
//     asks `tr_await(i)`: it gets the ranks' metrics and the checkpoint's
//     directory, and every rank gets its answer at the same time (empty, or
//     the reason report i failed). Ranks thus stay in lockstep with the
//     driver's record of the run, as they did through the store.
//  3. A rank whose loop returns sends `tr_done(rank, reports)`, one whose
//     loop throws `tr_fail(rank, what)`; the actor monitors every worker
//     and treats a worker gone as failed. tr_await answers with what ended
//     the attempt: every rank done, a rank failed, or report counts that
//     differ (the message names both ranks).
//
// A peer cannot make the driver hold more than a bounded amount: a
// report's metrics are capped at max_metrics_bytes (after CAF decoded them:
// the port guard caps what a plain port decodes at
// HVACTOR_MAX_MESSAGE_BYTES); only rank 0's process may send a path or get
// an upload ticket, only for the report being collected, once, and never
// after the attempt ended; on the data link a frame over
// knobs::ship_chunk_bytes is refused before anything is allocated, and
// each chunk goes to disk as the next ones arrive (at most four held).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/type_id.hpp>
#include <caf/typed_actor.hpp>

#include "hvactor/settings.hpp"
#include "base/net/connection_watchdog.hpp"
#include "base/net/data_link.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::train {

/// Largest encoded metrics of one report a rank may send.
inline constexpr size_t max_metrics_bytes = size_t{16} << 20;
/// A worker's reports without a checkpoint wait in its process (at most
/// this many, and this many bytes of metrics: report_pipe.hpp); up to
/// reports_sent_ahead of them are with the driver ahead of their turn, at
/// most report_bytes_in_flight bytes per rank there too.
inline constexpr size_t reports_in_flight = 64;
inline constexpr size_t reports_sent_ahead = 16;
inline constexpr size_t report_bytes_in_flight = size_t{64} << 20;

/// One rank's report `index`: its encoded metrics (encode_values) and, for
/// rank 0, whether it handed the driver a checkpoint before (tr_local or
/// tr_upload).
struct train_report {
  int32_t rank = 0;
  uint64_t index = 0;
  std::vector<char> metrics;
  bool checkpoint = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_report& x) {
  return f(caf::meta::type_name("train_report"), x.rank, x.index, x.metrics, x.checkpoint);
}

/// What tr_await answers (in the driver's process only).
struct train_event {
  enum kind_t : int32_t { report = 0, done = 1, rank_failed = 2, failed = 3 };
  int32_t kind = report;
  uint64_t index = 0;
  /// report: every rank's encoded metrics, in rank order.
  std::vector<std::vector<char>> metrics;
  /// report: the persisted checkpoint's directory (empty: none).
  std::string checkpoint_dir;
  /// report: why persisting failed (the ranks got it too); rank_failed and
  /// failed: what happened.
  std::string failure;
  /// rank_failed: which rank.
  int32_t rank = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_event& x) {
  return f(caf::meta::type_name("train_event"), x.kind, x.index, x.metrics, x.checkpoint_dir,
           x.failure, x.rank);
}

} // namespace hvactor::train

CAF_BEGIN_TYPE_ID_BLOCK(hvactor_train, caf::id_block::hvactor_handles::end)
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_report_atom, "tr_report")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_done_atom, "tr_done")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_fail_atom, "tr_fail")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_await_atom, "tr_await")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_local_atom, "tr_local")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_fetch_atom, "tr_fetch")
  CAF_ADD_ATOM(hvactor_train, hvactor::train, tr_upload_atom, "tr_upload")
  CAF_ADD_TYPE_ID(hvactor_train, (hvactor::train::train_report))
  CAF_ADD_TYPE_ID(hvactor_train, (hvactor::train::train_event))
CAF_END_TYPE_ID_BLOCK(hvactor_train)

namespace hvactor::train {

/// The driver's actor that owns one attempt's reports and checkpoints.
using train_progress = caf::typed_actor<
  // Rank 0's checkpoint of report `index` is the directory at this path on
  // the driver's machine: the actor copies it (only with
  // progress_config::local_checkpoints); then tr_report with a checkpoint.
  caf::replies_to<tr_local_atom, uint64_t, std::string>::with<bool>,
  // Answered once report `index` is recorded: empty, or why it failed.
  caf::replies_to<tr_report_atom, train_report>::with<std::string>,
  // The rank's loop returned after `reports` reports.
  caf::replies_to<tr_done_atom, int32_t, uint64_t>::with<bool>,
  // The rank's loop threw.
  caf::reacts_to<tr_fail_atom, int32_t, std::string>,
  // A ticket for the driver's data link (internal/transfer.hpp): rank
  // `rank`'s shard of dataset `index` (train_spec::datasets), or (one
  // argument) the checkpoint to resume from, or (tr_upload) rank 0's
  // checkpoint of report `index`, whose tr_report then says it has one.
  caf::replies_to<tr_fetch_atom, uint32_t, int32_t>::with<std::string>,
  caf::replies_to<tr_fetch_atom, int32_t>::with<std::string>,
  caf::replies_to<tr_upload_atom, uint64_t>::with<std::string>,
  // The trainer: the next event from report `index` on.
  caf::replies_to<tr_await_atom, uint64_t>::with<train_event>>;

/// Where and how the driver keeps one attempt's checkpoints.
struct progress_config {
  int32_t size = 0;
  std::filesystem::path run_dir;
  std::optional<int> num_to_keep;
  /// The job's workers by rank (job_info::workers), monitored.
  std::vector<caf::actor> workers;
  /// Accept tr_local: every peer is this user's process on this machine.
  bool local_checkpoints = false;
  /// Where the shard files are ("<dataset index>/<rank>"), served on the
  /// data link (tr_fetch); empty: no datasets.
  std::filesystem::path shard_dir;
  /// The checkpoint to resume from, served on the data link (tr_fetch);
  /// empty: none.
  std::filesystem::path resume_dir;
  /// The driver's data link (tr_fetch, tr_upload); none: refused. Shared
  /// with published_progress: whichever lets go last closes it, so that an
  /// actor still busy past its exit bound never offers on a closed one.
  std::shared_ptr<data_link::server> data;
  /// How long a data link ticket is good for (settings.timeout).
  std::chrono::milliseconds ticket_bound{30'000};
};

/// Spawns the attempt's progress actor (detached) in `sys`.
train_progress spawn_train_progress(caf::actor_system& sys, progress_config cfg);

/// The trainer's longest single wait on its progress actor. Events come as
/// messages; between two waits the trainer only checks that some call is
/// still running (a rank whose tr_done never reached the driver).
inline constexpr std::chrono::milliseconds await_bound{5'000};

/// The attempt's progress actor, published on the driver's address (where
/// the job's store is: `bind`) until destroyed, then told to exit. Under
/// TLS its port is watched by a connection watchdog of its own, as the
/// job's ports are by the runtime's. Throws hvactor::error naming the
/// address when the port cannot be opened.
class published_progress {
public:
  /// Also opens the attempt's data link on `bind` (data_link.hpp), with
  /// `tls` (empty: plain, loopback peers of this user only).
  published_progress(caf::actor_system& sys, progress_config cfg, const std::string& bind,
                     const tls::config& tls);
  ~published_progress();

  published_progress(const published_progress&) = delete;
  published_progress& operator=(const published_progress&) = delete;

  const train_progress& actor() const noexcept {
    return actor_;
  }
  uint16_t port() const noexcept {
    return port_;
  }
  uint16_t data_port() const noexcept {
    return data_->port();
  }

private:
  caf::actor_system& sys_;
  // Shared with the actor, which offers its transfers.
  std::shared_ptr<data_link::server> data_;
  train_progress actor_;
  uint16_t port_ = 0;
  std::unique_ptr<connection_watchdog> watchdog_;
};

/// The address a driver with `opts` publishes its jobs' actors on: --bind,
/// else the local address towards the head, else loopback (embedded).

/// Registers the messages above with a config (every system of a process
/// that loads hvactor::train gets them: process_system.hpp's registrar).
void register_train_types(caf::actor_system_config& cfg);

/// `partial` (".partial_checkpoint_NNNNNN") becomes checkpoint_NNNNNN under
/// cfg.run_dir; the checkpoints past num_to_keep are renamed aside into
/// `doomed`, to remove once the ranks have their answer (a 1 GiB
/// checkpoint took 0.3 s to remove). Returns the new directory.
std::filesystem::path persist_checkpoint(const progress_config& cfg,
                                         const std::filesystem::path& partial,
                                         std::vector<std::filesystem::path>& doomed);

/// The first free checkpoint_NNNNNN index under `dir`, and the name.
int64_t next_checkpoint_index(const std::filesystem::path& dir);
std::string checkpoint_dir_name(int64_t index);

} // namespace hvactor::train
