#pragma once

// Internal: hvactor::train's bulk bytes across machines on a data link of
// their own (base/net/data_link.hpp) instead of CAF messages. The driver's
// progress actor hands out a ticket over CAF (tr_fetch, tr_upload); the
// worker presents it on the driver's data link and the bytes flow:
//
//  - a shard: u64 size, then the file's bytes (sendfile on a plain link),
//    received straight into the shard's buffer;
//  - the checkpoint to resume from, and rank 0's checkpoint: the
//    checkpoint stream (internal/checkpoint_stream.hpp) as frames (u64
//    length, the chunk; at most knobs::ship_chunk_bytes each), then an
//    empty frame. An upload is answered with one frame: empty, or why the
//    driver refused it.
//
// Memory per transfer stays at one chunk on each side, whatever the size.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "hvactor/tls.hpp"
#include "base/net/data_link.hpp"
#include "train/internal/shard_bytes.hpp"

namespace hvactor::train {

/// "0" in the driver's environment keeps the bulk bytes on the progress
/// actor's CAF connection (tr_piece, tr_resume, tr_chunk): the route this
/// one replaced, kept for comparison (benchmarks/train_overhead).
inline constexpr const char* data_link_env = "HVACTOR_TRAIN_DATA_LINK";

/// Rank 0's checkpoint as it arrives on the data link: written into its
/// own hidden directory of the run, claimed by the progress actor when the
/// report completes, or removed.
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

/// The driver's side: tickets for a transfer on `link`, good for `valid`.
/// Shard `rank` of dataset `dataset` (the file is opened now: a missing one
/// is an hvactor::error here).
data_link::ticket offer_shard(data_link::server& link, const std::filesystem::path& shard_dir,
                              uint32_t dataset, int32_t rank, std::chrono::milliseconds valid);
/// The checkpoint directory `dir` as a stream, read as it is sent.
data_link::ticket offer_resume(data_link::server& link, const std::filesystem::path& dir,
                               std::chrono::milliseconds valid);
/// Rank 0's checkpoint of report `index` into `slot`. A refused one is
/// read to its end and answered with the reason.
data_link::ticket offer_upload(data_link::server& link, std::shared_ptr<upload_slot> slot,
                               uint64_t index, std::chrono::milliseconds valid);

/// Where a worker finds the driver's data link.
struct link_target {
  std::string host;
  uint16_t port = 0;
  /// The worker's TLS identity when its system talks TLS; empty otherwise.
  tls::config tls;
  std::chrono::milliseconds timeout{0};
};

/// The worker's side of the three transfers; hvactor::error naming what
/// failed. An upload returns the driver's refusal (empty: persisted).
shared_bytes fetch_shard_by_link(const link_target& to, const data_link::ticket& t);
void fetch_resume_by_link(const link_target& to, const data_link::ticket& t,
                          const std::filesystem::path& dir);
std::string upload_by_link(const link_target& to, const data_link::ticket& t,
                           const std::filesystem::path& dir);

} // namespace hvactor::train
