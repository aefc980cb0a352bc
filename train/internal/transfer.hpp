#pragma once

// Internal: hvactor::train's bulk bytes between the driver and its
// workers, on one of two routes. Three payloads travel: a rank's dataset
// shards and the checkpoint to resume from (driver -> worker), and rank
// 0's checkpoint of a report (worker -> driver).
//
//  - The same machine (choose_route): the driver's shard files are mapped,
//    the checkpoint to resume from is copied from the driver's disk (on
//    failure it comes on the data link instead), and the driver copies
//    rank 0's checkpoint directory itself (tr_local with its path).
//  - The data link (base/net/data_link.hpp), everywhere else: the driver's
//    progress actor hands out a ticket over CAF (tr_fetch, tr_upload); the
//    worker presents it on the driver's data link and the bytes flow:
//     - a shard: u64 size, then the file's bytes (sendfile on a plain
//       link), received straight into the shard's buffer;
//     - the checkpoint to resume from, and rank 0's checkpoint: the
//       checkpoint stream (internal/checkpoint_stream.hpp) as frames (u64
//       length, the chunk; at most knobs::ship_chunk_bytes each), then an
//       empty frame. An upload is answered with one frame: empty, or why
//       the driver refused it.
//
// Rank 0's checkpoint lands in an upload_slot either way, which the
// progress actor claims when the report completes. Memory per transfer
// stays at one chunk on each side, whatever the size.
//
// transfer.cpp holds the route choice, the driver's offers and the
// worker's side; transfer_link.cpp the data link's half (the frames, the
// threads that read and write them, the upload slots).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include <caf/actor_system.hpp>

#include "hvactor/tls.hpp"
#include "base/net/data_link.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_progress.hpp"

namespace hvactor::train {

// -- The route -----------------------------------------------------------

/// "0" turns the same machine's route off (the driver's environment):
/// checkpoints, shards and the resume checkpoint then go on the data link
/// over loopback, as between machines.
inline constexpr const char* local_route_env = "HVACTOR_TRAIN_LOCAL_ROUTE";

enum class byte_route { same_machine, data_link };

/// The driver's side of the choice: whether its workers may take the same
/// machine's route (train_spec::local_checkpoints). Only on loopback,
/// without TLS and with the port guard's same-user rule (every peer of the
/// driver is then this user's process on this machine), and unless
/// local_route_env is "0".
bool same_machine_allowed(const std::string& bind_host, bool secure);

/// The worker's side: the same machine when the driver allows it and the
/// worker sees the driver's files (`driver_view`, the driver's
/// machine_view(), equal to its own); else the data link.
byte_route choose_route(bool local_checkpoints, const std::string& driver_view);

// -- The driver's side ---------------------------------------------------

/// Rank 0's checkpoint as it arrives: written into its own hidden
/// directory of the run, claimed by the progress actor when the report
/// completes, or removed.
class upload_slot {
public:
  explicit upload_slot(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const noexcept {
    return dir_;
  }
  /// The transfer ended: complete (`why` empty) or not. A slot cancelled
  /// meanwhile has its directory removed here.
  void finished(std::string why);
  /// Empty when the checkpoint is complete in dir() (the caller owns the
  /// directory from now on); else why it is not.
  std::string claim();
  /// The report is dropped: the directory goes, now or when the transfer
  /// ends.
  void cancel();

private:
  enum class state { running, complete, failed, claimed, cancelled };
  std::mutex mu_;
  state state_ = state::running;
  std::string why_;
  std::filesystem::path dir_;
};

/// A fresh slot for rank 0's checkpoint: ".partial_upload_<random>" under
/// `run_dir` (not made yet).
std::shared_ptr<upload_slot> new_upload_slot(const std::filesystem::path& run_dir);

/// The same machine's upload: copies rank 0's directory `src` into `slot`
/// now (copy_checkpoint_dir: only this user's files, nothing through a
/// symbolic link, holes kept) and finishes the slot. hvactor::error
/// "checkpoint of report N refused: ..." when the copy fails (nothing of
/// it stays).
void copy_upload(upload_slot& slot, const std::filesystem::path& src, uint64_t index);

/// Tickets on the attempt's data link (cfg.data), good for
/// cfg.ticket_bound: rank `rank`'s shard of dataset `dataset` (the file is
/// opened now) or the checkpoint to resume from (cfg.resume_dir, for a
/// rank of the attempt). hvactor::error naming why not.
data_link::ticket offer_shard_fetch(const progress_config& cfg, uint32_t dataset, int32_t rank);
data_link::ticket offer_resume_fetch(const progress_config& cfg, int32_t rank);

// -- The worker's side ---------------------------------------------------

/// Where a worker finds the driver's data link.
struct link_target {
  std::string host;
  uint16_t port = 0;
  /// The worker's TLS identity when its system talks TLS; empty otherwise.
  tls::config tls;
  /// Bound on each read and write, and on each request to the driver.
  std::chrono::milliseconds timeout{0};
};

/// One worker's transfers with the driver's progress actor, on `route`.
/// Every call throws hvactor::error naming what failed.
class worker_transfers {
public:
  worker_transfers(caf::actor_system& sys, train_progress progress, byte_route route,
                   link_target link, int32_t rank);

  byte_route route() const noexcept {
    return route_;
  }
  /// This rank's shard of dataset `dataset`: the driver's file
  /// "<shard_dir>/<dataset>/<rank>" mapped, or its bytes from the data
  /// link in fresh memory.
  shared_bytes fetch_shard(uint32_t dataset, const std::string& shard_dir);
  /// The checkpoint to resume from into `dir` (created): copied from
  /// `resume_path` on the same machine, on the data link when that copy
  /// fails (another user's file, say) or elsewhere.
  void fetch_resume(const std::string& resume_path, const std::filesystem::path& dir);
  /// Rank 0's checkpoint `dir` of report `index`, until the driver holds
  /// it: copied by the driver on the same machine (bounded by the timeout
  /// plus 1 ms per 10 kB), else uploaded on the data link.
  void upload(uint64_t index, const std::filesystem::path& dir);

private:
  caf::actor_system& sys_;
  train_progress progress_;
  byte_route route_;
  link_target link_;
  int32_t rank_;
};

// -- The data link's half (transfer_link.cpp) ----------------------------

/// The driver: tickets for a transfer on `link`, good for `valid`. Shard
/// `rank` of dataset `dataset` (the file is opened now: a missing one is
/// an hvactor::error here); the checkpoint directory `dir` as a stream,
/// read as it is sent; rank 0's checkpoint of report `index` into `slot`
/// (a refused one is read to its end and answered with the reason).
data_link::ticket offer_shard(data_link::server& link, const std::filesystem::path& shard_dir,
                              uint32_t dataset, int32_t rank, std::chrono::milliseconds valid);
data_link::ticket offer_resume(data_link::server& link, const std::filesystem::path& dir,
                               std::chrono::milliseconds valid);
data_link::ticket offer_upload(data_link::server& link, std::shared_ptr<upload_slot> slot,
                               uint64_t index, std::chrono::milliseconds valid);

/// The worker: the three transfers on a ticket; hvactor::error naming what
/// failed. An upload returns the driver's refusal (empty: persisted).
shared_bytes fetch_shard_by_link(const link_target& to, const data_link::ticket& t);
void fetch_resume_by_link(const link_target& to, const data_link::ticket& t,
                          const std::filesystem::path& dir);
std::string upload_by_link(const link_target& to, const data_link::ticket& t,
                           const std::filesystem::path& dir);

} // namespace hvactor::train
