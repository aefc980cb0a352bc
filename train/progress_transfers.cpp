// hvactor::train's driver: the bytes its progress actor takes and gives
// (internal/progress_state.hpp): rank 0's checkpoints as chunks, by path
// or on the data link, shard pieces and the resume checkpoint as chunks,
// and tickets for the data link.

#include <random>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/log.hpp"
#include "train/internal/progress_state.hpp"
#include "train/internal/shard_bytes.hpp"

namespace hvactor::train::progress {

caf::error refused(const std::string& what) {
  return make_error(error_kind::generic, "train::report: " + what);
}

bool from_rank0(progress_actor self) {
  auto& ws = self->state.cfg.workers;
  auto sender = self->current_sender();
  return ws.empty() || (sender && sender->node() == ws[0].node());
}

// Writes chunk `no` of rank 0's checkpoint stream as it comes (in order:
// CAF keeps one sender's messages in order); the first one opens the
// partial directory. A refused stream is dropped at once, and the report
// fails with the reason.
caf::result<bool> on_chunk(progress_actor self, train_chunk& c) {
  auto& st = self->state;
  if (st.end)
    return refused("a checkpoint chunk after the attempt ended");
  if (!from_rank0(self))
    return refused("a checkpoint chunk from a process other than rank 0's");
  if (c.index != st.next || st.complete)
    return refused(fmt::format("a checkpoint chunk for report {} while the driver collects "
                               "report {}",
                               c.index + 1, st.next + 1));
  if (!st.sink_error.empty())
    return refused(st.sink_error);
  try {
    if (c.no != st.chunks_fed || c.no >= max_chunks || st.copied || (c.no != 0 && !st.sink))
      throw std::runtime_error(fmt::format("chunk {} came where {} was due", c.no,
                                           st.copied ? std::string{"none (the checkpoint was "
                                                                   "copied)"}
                                                     : "chunk " + std::to_string(st.chunks_fed)));
    if (c.no == 0) {
      st.open_partial();
      st.sink = std::make_unique<checkpoint_sink>(st.partial);
    }
    st.sink->feed(c.bytes);
    ++st.chunks_fed;
    return true;
  } catch (const std::exception& e) {
    st.sink_error = fmt::format("checkpoint of report {} refused: {}", c.index + 1, e.what());
    log::error("train: {}", st.sink_error);
    st.drop_partial();
    return refused(st.sink_error);
  }
}

// Rank 0's checkpoint as a directory on this machine: copied into the
// partial directory now (copy_checkpoint_dir), the stream's one chunk.
caf::result<bool> on_local(progress_actor self, uint64_t index, const std::string& dir) {
  auto& st = self->state;
  if (!st.cfg.local_checkpoints)
    return refused("a checkpoint by path, which this driver takes only from its own machine");
  if (st.end)
    return refused("a checkpoint by path after the attempt ended");
  if (!from_rank0(self))
    return refused("a checkpoint by path from a process other than rank 0's");
  if (index != st.next || st.complete || st.chunks_fed != 0 || !st.sink_error.empty())
    return refused(fmt::format("a checkpoint by path for report {} while the driver collects "
                               "report {}",
                               index + 1, st.next + 1));
  try {
    st.open_partial();
    copy_checkpoint_dir(dir, st.partial);
    st.copied = true;
    st.chunks_fed = 1;
    return true;
  } catch (const std::exception& e) {
    st.sink_error = fmt::format("checkpoint of report {} refused: {}", index + 1, e.what());
    log::error("train: {}", st.sink_error);
    st.drop_partial();
    return refused(st.sink_error);
  }
}

// Rank 0's checkpoint on the data link: a ticket for the transfer into a
// hidden directory of its own (internal/data_route.hpp), the stream's one
// chunk.
caf::result<std::string> on_upload(progress_actor self, uint64_t index) {
  auto& st = self->state;
  if (!st.cfg.data)
    return refused("a checkpoint upload, which this driver takes as messages");
  if (st.end)
    return refused("a checkpoint upload after the attempt ended");
  if (!from_rank0(self))
    return refused("a checkpoint upload from a process other than rank 0's");
  if (index != st.next || st.complete || st.chunks_fed != 0 || !st.sink_error.empty())
    return refused(fmt::format("a checkpoint upload for report {} while the driver collects "
                               "report {}",
                               index + 1, st.next + 1));
  try {
    st.open_partial();
    std::random_device rd;
    auto tag = fmt::format("{:08x}{:08x}", rd(), rd());
    st.upload = std::make_shared<upload_slot>(st.cfg.run_dir / (".partial_upload_" + tag));
    st.chunks_fed = 1;
    return offer_upload(*st.cfg.data, st.upload, index, st.cfg.ticket_bound);
  } catch (const std::exception& e) {
    st.drop_partial();
    return refused(e.what());
  }
}

namespace {

// A ticket for a shard or the resume checkpoint on the data link.
template <class Offer>
caf::result<std::string> fetch_ticket(progress_actor self, const char* what, Offer offer) {
  if (!self->state.cfg.data)
    return make_error(error_kind::generic,
                      fmt::format("{}: this driver sends its bytes as messages", what));
  try {
    return offer(*self->state.cfg.data);
  } catch (const std::exception& e) {
    return make_error(error_kind::generic, fmt::format("{}: {}", what, e.what()));
  }
}

} // namespace

// Chunk `no` of the resume checkpoint's stream for `rank`, read as asked.
caf::result<std::vector<char>> on_resume(progress_actor self, int32_t rank, uint32_t no) {
  auto& st = self->state;
  auto& [source, at] = st.resumes[rank];
  try {
    if (st.cfg.resume_dir.empty() || rank < 0 || rank >= st.cfg.size)
      throw error("this attempt has no checkpoint to resume from for that rank");
    if (no == 0)
      std::tie(source, at) = std::make_pair(std::make_unique<checkpoint_source>(st.cfg.resume_dir), 0u);
    if (!source || no != at++)
      throw error(fmt::format("chunk {} asked where chunk {} was due", no, at - 1));
    auto chunk = source->next();
    return chunk ? std::move(*chunk) : (source.reset(), std::vector<char>{});
  } catch (const std::exception& e) {
    st.resumes.erase(rank);
    return make_error(error_kind::generic, std::string{"train::get_checkpoint: "} + e.what());
  }
}

caf::result<uint64_t, std::vector<char>> on_piece(progress_actor self, uint32_t dataset,
                                                 int32_t rank, uint64_t offset) {
  try {
    auto [size, bytes] = read_shard_piece(self->state.cfg.shard_dir.string(), dataset, rank,
                                          offset, knobs::ship_chunk_bytes);
    return {size, std::move(bytes)};
  } catch (const std::exception& e) {
    return make_error(error_kind::generic, std::string{"train::get_dataset_shard: "} + e.what());
  }
}

caf::result<std::string> on_fetch_shard(progress_actor self, uint32_t dataset, int32_t rank) {
  auto& cfg = self->state.cfg;
  return fetch_ticket(self, "train::get_dataset_shard", [&](data_link::server& link) {
    return offer_shard(link, cfg.shard_dir, dataset, rank, cfg.ticket_bound);
  });
}

caf::result<std::string> on_fetch_resume(progress_actor self, int32_t rank) {
  auto& cfg = self->state.cfg;
  return fetch_ticket(self, "train::get_checkpoint", [&](data_link::server& link) {
    if (cfg.resume_dir.empty() || rank < 0 || rank >= cfg.size)
      throw error("this attempt has no checkpoint to resume from for that rank");
    return offer_resume(link, cfg.resume_dir, cfg.ticket_bound);
  });
}

} // namespace hvactor::train::progress
