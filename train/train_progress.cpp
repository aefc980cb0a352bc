// hvactor::train's driver-side record of one attempt: the ranks' reports,
// rank 0's checkpoints persisted under the run's directory, and what ended
// the attempt (internal/train_progress.hpp).

#include "train/internal/train_progress.hpp"
#include "train/internal/progress_state.hpp"

#include <algorithm>
#include <map>
#include <random>

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
#include "train/internal/data_route.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_protocol.hpp"
#include "base/net/transport.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace progress {

namespace {


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
      if (st.upload) {
        // Complete on the data link: the actor owns the directory now.
        if (auto why = st.upload->claim(); !why.empty())
          throw std::runtime_error("its upload failed: " + why);
        fs::rename(st.upload->dir(), st.partial);
        st.upload.reset();
        st.copied = true;
      }
      bool whole = st.copied || (st.sink && st.sink->complete());
      if (st.chunks_fed != st.chunk_count || !whole)
        throw std::runtime_error(fmt::format("{} of its {} chunks came", st.chunks_fed,
                                             st.chunk_count));
      st.sink.reset();
      ev.checkpoint_dir = persist_checkpoint(st.cfg, st.partial, st.doomed).string();
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
    [self](tr_piece_atom, uint32_t dataset, int32_t rank, uint64_t offset) {
      return on_piece(self, dataset, rank, offset);
    },
    [self](tr_resume_atom, int32_t rank, uint32_t no) { return on_resume(self, rank, no); },
    [self](tr_fetch_atom, uint32_t dataset, int32_t rank) {
      return on_fetch_shard(self, dataset, rank);
    },
    [self](tr_fetch_atom, int32_t rank) { return on_fetch_resume(self, rank); },
    [self](tr_upload_atom, uint64_t index) { return on_upload(self, index); },
    [self](tr_await_atom, uint64_t index) { return on_await(self, index); },
  };
}

} // namespace

} // namespace progress

train_progress spawn_train_progress(caf::actor_system& sys, progress_config cfg) {
  return sys.spawn<caf::detached>(progress::progress_impl, std::move(cfg));
}

} // namespace hvactor::train
