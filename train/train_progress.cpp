// hvactor::train's driver-side record of one attempt: the ranks' reports,
// rank 0's checkpoints persisted under the run's directory, and what ended
// the attempt (internal/train_progress.hpp).

#include "train/internal/train_progress.hpp"

#include <algorithm>
#include <map>
#include <regex>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs.hpp"
#include "base/internal/log.hpp"
#include "base/internal/process_system.hpp"
#include "base/net/net.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_protocol.hpp"
#include "base/net/transport.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace {

// A checkpoint's chunks, at most: as many as the store accepts for a
// chunked value (get_stream).
constexpr uint32_t max_chunks = knobs::max_message_bytes / knobs::ship_chunk_bytes * 64;

const std::regex& checkpoint_pattern() {
  static const std::regex pattern{"checkpoint_([0-9]{6,})"};
  return pattern;
}

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

// The streamed checkpoint in `partial` becomes checkpoint_NNNNNN.
// Checkpoints past num_to_keep are renamed out of the way here (cheap)
// and removed into `doomed` once the ranks have their answer (a 1 GiB
// checkpoint took 0.3 s to remove).
fs::path persist(const progress_config& cfg, const fs::path& partial,
                 std::vector<fs::path>& doomed) {
  auto name = partial.filename().string().substr(std::string_view{".partial_"}.size());
  auto final_dir = cfg.run_dir / name;
  fs::rename(partial, final_dir);
  std::error_code ec;
  if (auto keep = cfg.num_to_keep) {
    // By index: the newest `keep` stay.
    std::vector<std::pair<int64_t, fs::path>> all;
    for (fs::directory_iterator it{cfg.run_dir, ec}, end; !ec && it != end; it.increment(ec)) {
      std::smatch m;
      auto name = it->path().filename().string();
      if (std::regex_match(name, m, checkpoint_pattern()))
        all.emplace_back(std::stoll(m[1]), it->path());
    }
    std::sort(all.begin(), all.end());
    for (size_t k = 0; k + static_cast<size_t>(*keep) < all.size(); ++k) {
      auto gone = cfg.run_dir / (".removing_" + all[k].second.filename().string());
      fs::rename(all[k].second, gone, ec);
      doomed.push_back(ec ? all[k].second : gone);
    }
  }
  return final_dir;
}

// The attempt ended: the trainer learns it, and every waiting rank.
void finish(progress_actor self, train_event end) {
  auto& st = self->state;
  if (st.end)
    return;
  st.end = std::move(end);
  for (auto& [rank, answer] : st.answers)
    answer.deliver(std::string{"the worker group failed: "} + st.end->failure);
  st.answers.clear();
  for (auto& [index, ranks] : st.early)
    for (auto& [rank, entry] : ranks)
      entry.second.deliver(std::string{"the worker group failed: "} + st.end->failure);
  st.early.clear();
  st.early_bytes.clear();
  if (st.awaiting && !st.complete) {
    st.awaiting->deliver(*st.end);
    st.awaiting.reset();
  }
}

// Report `next` from every rank: persist, then wait for the trainer.
void complete_report(progress_actor self) {
  auto& st = self->state;
  train_event ev;
  ev.index = st.next;
  for (auto& [rank, m] : st.metrics)
    ev.metrics.push_back(std::move(m));
  if (st.chunk_count > 0) {
    try {
      if (!st.sink_error.empty())
        throw std::runtime_error(st.sink_error);
      bool whole = st.copied || (st.sink && st.sink->complete());
      if (st.chunks_fed != st.chunk_count || !whole)
        throw std::runtime_error(fmt::format("{} of its {} chunks came", st.chunks_fed,
                                             st.chunk_count));
      st.sink.reset();
      ev.checkpoint_dir = persist(st.cfg, st.partial, st.doomed).string();
      st.partial.clear();
    } catch (const std::exception& e) {
      ev.failure = fmt::format("the driver could not persist the checkpoint of report {}: {}",
                               st.next + 1, e.what());
      log::error("train: {}", ev.failure);
    }
  }
  st.drop_partial();
  st.sink_error.clear();
  st.metrics.clear();
  st.chunk_count = 0;
  st.complete = std::move(ev);
}

void promote_early(progress_actor self);

// Hands the complete report to the waiting trainer and answers its ranks.
void hand_over(progress_actor self) {
  auto& st = self->state;
  if (!st.complete || !st.awaiting)
    return;
  for (auto& [rank, answer] : st.answers)
    answer.deliver(st.complete->failure);
  st.answers.clear();
  st.last = std::move(*st.complete);
  st.awaiting->deliver(*st.last);
  st.awaiting.reset();
  st.complete.reset();
  ++st.next;
  st.remove_doomed();
  promote_early(self);
}

// A rank returned after `reports` reports while another made one more.
std::optional<std::string> count_mismatch(const progress_state& st) {
  for (auto& [finished, count] : st.done)
    for (auto& [rank, _] : st.metrics)
      if (count <= st.next && rank != finished)
        return fmt::format(
          "train: rank {} returned from the training loop after {} report{}, while rank {} made "
          "report {}: every worker must call train::report() the same number of times",
          finished, count, count == 1 ? "" : "s", rank, st.next + 1);
  return std::nullopt;
}

caf::error refused(const std::string& what) {
  return make_error(error_kind::generic, "train::report: " + what);
}

// Writes chunk `no` of rank 0's checkpoint stream as it comes (in order:
// CAF keeps one sender's messages in order); the first one opens the
// partial directory. A refused stream is dropped at once, and the report
// fails with the reason.
// Rank 0's checkpoint comes from rank 0's process only (unit tests give no
// workers: anyone).
bool from_rank0(progress_actor self) {
  auto& ws = self->state.cfg.workers;
  auto sender = self->current_sender();
  return ws.empty() || (sender && sender->node() == ws[0].node());
}

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

// Rank `rank`'s report `next` joins the one being collected; with the
// last rank in, it is persisted and handed over.
void take(progress_actor self, int32_t rank, std::vector<char> metrics,
          caf::typed_response_promise<std::string> answer) {
  auto& st = self->state;
  st.metrics.emplace(rank, std::move(metrics));
  st.answers.emplace(rank, std::move(answer));
  if (auto why = count_mismatch(st)) {
    finish(self, {.kind = train_event::failed, .failure = *why});
  } else if (st.metrics.size() == static_cast<size_t>(st.cfg.size)) {
    complete_report(self);
    hand_over(self);
  }
}

// A report without a checkpoint ahead of its turn (report_pipe sends up
// to reports_sent_ahead): kept, bounded per rank, until `next` reaches it.
bool keep_early(progress_actor self, train_report& r) {
  auto& st = self->state;
  bool ahead = r.index > st.next || (r.index == st.next && st.complete);
  if (!ahead || r.chunks != 0 || r.rank < 0 || r.rank >= st.cfg.size
      || r.index > st.next + reports_sent_ahead || r.metrics.size() > max_metrics_bytes
      || st.early_bytes[r.rank] + r.metrics.size() > report_bytes_in_flight)
    return false;
  auto& at = st.early[r.index];
  if (at.count(r.rank))
    return false;
  st.early_bytes[r.rank] += r.metrics.size();
  at.emplace(r.rank, std::make_pair(std::move(r.metrics),
                                    self->make_response_promise<std::string>()));
  return true;
}

// Report `next` (just advanced to) from the ranks that sent it early.
void promote_early(progress_actor self) {
  auto& st = self->state;
  auto it = st.early.find(st.next);
  if (it == st.early.end())
    return;
  auto ranks = std::move(it->second);
  st.early.erase(it);
  for (auto& [rank, entry] : ranks) {
    st.early_bytes[rank] -= entry.first.size();
    if (st.end)
      entry.second.deliver(std::string{"the worker group failed: "} + st.end->failure);
    else
      take(self, rank, std::move(entry.first), std::move(entry.second));
  }
}

caf::result<std::string> on_report(progress_actor self, train_report& r) {
  auto& st = self->state;
  if (st.end)
    return std::string{"the worker group failed: "} + st.end->failure;
  if (keep_early(self, r))
    return st.early[r.index].at(r.rank).second;
  if (r.rank < 0 || r.rank >= st.cfg.size || r.index != st.next || st.complete
      || st.metrics.count(r.rank) || r.metrics.size() > max_metrics_bytes
      || r.chunks > max_chunks || (r.rank != 0 && r.chunks > 0))
    return refused(fmt::format("report {} of rank {} refused: the driver collects report {} of "
                               "{} ranks (at most {} bytes of metrics)",
                               r.index + 1, r.rank, st.next + 1, st.cfg.size, max_metrics_bytes));
  if (r.rank == 0)
    st.chunk_count = r.chunks;
  auto answer = self->make_response_promise<std::string>();
  take(self, r.rank, std::move(r.metrics), answer);
  return answer;
}

bool on_done(progress_actor self, int32_t rank, uint64_t reports) {
  auto& st = self->state;
  st.done.emplace(rank, reports);
  if (auto why = count_mismatch(st)) {
    finish(self, {.kind = train_event::failed, .failure = *why});
  } else if (st.done.size() == static_cast<size_t>(st.cfg.size) && st.awaiting && !st.end
             && !st.complete) {
    st.awaiting->deliver(train_event{.kind = train_event::done, .index = st.next});
    st.awaiting.reset();
  }
  return true;
}

caf::result<train_event> on_await(progress_actor self, uint64_t index) {
  auto& st = self->state;
  if (st.awaiting) // a trainer whose wait timed out asks again: the new ask wins
    st.awaiting->deliver(make_error(error_kind::generic, "train: a newer tr_await came"));
  st.awaiting = self->make_response_promise<train_event>();
  auto answer = *st.awaiting;
  if (st.last && index + 1 == st.next)
    st.awaiting->deliver(*st.last);
  else if (index != st.next)
    st.awaiting->deliver(make_error(error_kind::generic,
                                    fmt::format("train: the trainer awaits report {}, the driver "
                                                "collects report {}",
                                                index + 1, st.next + 1)));
  else if (st.complete)
    hand_over(self);
  else if (st.end)
    st.awaiting->deliver(*st.end);
  else if (st.done.size() == static_cast<size_t>(st.cfg.size))
    st.awaiting->deliver(train_event{.kind = train_event::done, .index = st.next});
  else
    return answer;
  st.awaiting.reset();
  return answer;
}

// A monitored worker went away before its loop returned: its rank failed.
void on_down(progress_actor self, const caf::down_msg& dm) {
  auto& ws = self->state.cfg.workers;
  for (size_t r = 0; r < ws.size(); ++r)
    if (ws[r].address() == dm.source && !self->state.done.count(static_cast<int32_t>(r)))
      finish(self, {.kind = train_event::rank_failed,
                    .failure = fmt::format("rank {} was lost ({})", r, describe(dm.reason)),
                    .rank = static_cast<int32_t>(r)});
}

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

train_progress::behavior_type progress_impl(progress_actor self, progress_config cfg) {
  self->state.cfg = std::move(cfg);
  for (auto& w : self->state.cfg.workers)
    self->monitor(w);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
    [self](tr_chunk_atom, train_chunk& c) { return on_chunk(self, c); },
    [self](tr_local_atom, uint64_t index, const std::string& dir) {
      return on_local(self, index, dir);
    },
    [self](tr_report_atom, train_report& r) { return on_report(self, r); },
    [self](tr_done_atom, int32_t rank, uint64_t reports) { return on_done(self, rank, reports); },
    [self](tr_fail_atom, int32_t rank, const std::string& what) {
      finish(self, {.kind = train_event::rank_failed,
                    .failure = fmt::format("rank {} failed: {}", rank, what),
                    .rank = rank});
    },
    [self](tr_piece_atom, uint32_t dataset, int32_t rank,
           uint64_t offset) -> caf::result<uint64_t, std::vector<char>> {
      try {
        auto [size, bytes] = read_shard_piece(self->state.cfg.shard_dir.string(), dataset, rank,
                                              offset, knobs::ship_chunk_bytes);
        return {size, std::move(bytes)};
      } catch (const std::exception& e) {
        return make_error(error_kind::generic, std::string{"train::get_dataset_shard: "} + e.what());
      }
    },
    [self](tr_resume_atom, int32_t rank, uint32_t no) { return on_resume(self, rank, no); },
    [self](tr_await_atom, uint64_t index) { return on_await(self, index); },
  };
}

} // namespace

train_progress spawn_train_progress(caf::actor_system& sys, progress_config cfg) {
  return sys.spawn<caf::detached>(progress_impl, std::move(cfg));
}

int64_t next_checkpoint_index(const fs::path& dir) {
  int64_t next = 0;
  std::error_code ec;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    auto name = it->path().filename().string();
    if (std::regex_match(name, m, checkpoint_pattern()))
      next = std::max<int64_t>(next, std::stoll(m[1]) + 1);
  }
  return next;
}

std::string checkpoint_dir_name(int64_t index) {
  return fmt::format("checkpoint_{:06d}", index);
}

} // namespace hvactor::train
