// hvactor::train's driver-side record of one attempt: the ranks' reports,
// rank 0's checkpoints taken (internal/transfer.hpp moves the bytes) and
// persisted under the run's directory, and what ended the attempt
// (internal/train_progress.hpp).

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
#include "base/internal/log.hpp"
#include "base/internal/process_system.hpp"
#include "base/net/net.hpp"
#include "train/internal/transfer.hpp"
#include "train/internal/train_protocol.hpp"

namespace fs = std::filesystem;

namespace hvactor::train {

namespace progress {

namespace {

// An error for a refused report or transfer: "train::report: " + what.
caf::error refused(const std::string& what) {
  return make_error(error_kind::generic, "train::report: " + what);
}

// The sender is rank 0's process (unit tests give no workers: anyone).
bool from_rank0(progress_actor self) {
  auto& ws = self->state.cfg.workers;
  auto sender = self->current_sender();
  return ws.empty() || (sender && sender->node() == ws[0].node());
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
  if (st.with_checkpoint) {
    try {
      if (!st.upload)
        throw std::runtime_error("its checkpoint did not come");
      // Copied or complete on the data link: the actor owns the directory
      // now.
      if (auto why = st.upload->claim(); !why.empty())
        throw std::runtime_error("its upload failed: " + why);
      fs::rename(st.upload->dir(), st.partial);
      st.upload.reset();
      ev.checkpoint_dir = persist_checkpoint(st.cfg, st.partial, st.doomed).string();
      st.partial.clear();
    } catch (const std::exception& e) {
      ev.failure = fmt::format("the driver could not persist the checkpoint of report {}: {}",
                               st.next + 1, e.what());
      log::error("train: {}", ev.failure);
    }
  }
  st.drop_partial();
  st.metrics.clear();
  st.with_checkpoint = false;
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
  if (!ahead || r.checkpoint || r.rank < 0 || r.rank >= st.cfg.size
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
      || (r.rank != 0 && r.checkpoint))
    return refused(fmt::format("report {} of rank {} refused: the driver collects report {} of "
                               "{} ranks (at most {} bytes of metrics)",
                               r.index + 1, r.rank, st.next + 1, st.cfg.size, max_metrics_bytes));
  if (r.rank == 0)
    st.with_checkpoint = r.checkpoint;
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

// Whether rank 0's checkpoint of report `index` may come now, `how`
// ("by path", "upload"): from rank 0's process, for the report being
// collected, once, and before the attempt ended.
std::optional<caf::error> refuse_checkpoint(progress_actor self, uint64_t index,
                                            const char* how) {
  auto& st = self->state;
  if (st.end)
    return refused(fmt::format("a checkpoint {} after the attempt ended", how));
  if (!from_rank0(self))
    return refused(fmt::format("a checkpoint {} from a process other than rank 0's", how));
  if (index != st.next || st.complete || st.upload)
    return refused(fmt::format("a checkpoint {} for report {} while the driver collects report "
                               "{}",
                               how, index + 1, st.next + 1));
  return std::nullopt;
}

// Rank 0's checkpoint as a directory on this machine: copied into an
// upload slot now (internal/transfer.hpp, copy_upload).
caf::result<bool> on_local(progress_actor self, uint64_t index, const std::string& dir) {
  auto& st = self->state;
  if (!st.cfg.local_checkpoints)
    return refused("a checkpoint by path, which this driver takes only from its own machine");
  if (auto no = refuse_checkpoint(self, index, "by path"))
    return *no;
  try {
    st.open_partial();
    st.upload = new_upload_slot(st.cfg.run_dir);
    copy_upload(*st.upload, dir, index);
    return true;
  } catch (const std::exception& e) {
    return refused(e.what()); // the failed slot fails the report
  }
}

// Rank 0's checkpoint on the data link: a ticket for the transfer into an
// upload slot (internal/transfer.hpp, offer_upload).
caf::result<std::string> on_upload(progress_actor self, uint64_t index) {
  auto& st = self->state;
  if (!st.cfg.data)
    return refused("a checkpoint upload, which this driver cannot take: it has no data link");
  if (auto no = refuse_checkpoint(self, index, "upload"))
    return *no;
  try {
    st.open_partial();
    st.upload = new_upload_slot(st.cfg.run_dir);
    return offer_upload(*st.cfg.data, st.upload, index, st.cfg.ticket_bound);
  } catch (const std::exception& e) {
    st.drop_partial();
    return refused(e.what());
  }
}

// A ticket for a shard or the resume checkpoint on the data link.
template <class Offer>
caf::result<std::string> fetch_ticket(const char* what, Offer offer) {
  try {
    return offer();
  } catch (const std::exception& e) {
    return make_error(error_kind::generic, fmt::format("{}: {}", what, e.what()));
  }
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
    [self](tr_fetch_atom, uint32_t dataset, int32_t rank) {
      return fetch_ticket("train::get_dataset_shard",
                          [&] { return offer_shard_fetch(self->state.cfg, dataset, rank); });
    },
    [self](tr_fetch_atom, int32_t rank) {
      return fetch_ticket("train::get_checkpoint",
                          [&] { return offer_resume_fetch(self->state.cfg, rank); });
    },
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
