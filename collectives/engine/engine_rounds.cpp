// The engine's rounds: its thread's loop (when a round starts: new work,
// a full batch, a waiter, the cycle time, the heartbeat, shutdown), one
// negotiation round, the exchanges its header asks for (settle), the stall
// inspection after it; the ranks' end (ending_error) and a joined rank's
// zeros.
#include "collectives/engine/engine.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "base/internal/log.hpp"
#include <hvactor/event.hpp>

namespace hvactor::hvd::detail {

using collectives::operation;

// True when the new submissions fill a batch, or one is not fusible (a
// synchronous caller waits for it).
bool engine::run_closed() const {
  std::vector<collectives::fusion_entry> run;
  for (auto& p : incoming_) {
    if (!p->fusible)
      return true;
    run.push_back(entry_of(*p));
  }
  return planner_.batch_size(run) < run.size();
}

// A rank without work still joins a round every heartbeat: a peer that
// waits in a round for it (this rank is busy outside hvd calls) then waits
// one heartbeat per round, never the transport's timeout; stalls are the
// stall inspector's to report.
std::chrono::milliseconds engine::heartbeat() const {
  return std::min<std::chrono::milliseconds>(knobs::negotiation_heartbeat, opts_.timeout / 4);
}

// The heartbeat of a rank that has had nothing to do for a while: it
// doubles after each round that found this rank without work, up to 16 s,
// and at most half the job's timeout (a peer waiting in a round for this
// one then waits at most half its transport's timeout) and a quarter of
// the stall warning time (so that the stall inspector warns in time): 15 s
// with Horovod's defaults. Idle ranks met every second before, then every
// 7.5 s: at 128 ranks each round costs every rank about 1 ms of CPU (a
// recursive-doubling exchange of 7 steps), and those rounds were most of
// an idle job's CPU. What a submission waits for never depends on it: the
// submitting rank starts a round at once, and a peer's pending round
// completes with it.
std::chrono::milliseconds engine::idle_heartbeat() const {
  using std::chrono::milliseconds;
  auto longest = std::min<milliseconds>(idle_heartbeat_max, opts_.timeout / 2);
  if (!opts_.stall.disabled)
    longest = std::min<milliseconds>(longest, opts_.stall.warning / 4);
  auto beat = heartbeat() * (int64_t{1} << std::min(idle_rounds_, 4));
  return std::max(heartbeat(), std::min(beat, longest));
}

// After a round that readied nothing, the next one (unless new work comes
// first): a cycle after it, or, while such rounds go on, a pause of an
// eighth of their time (at most a tenth of the heartbeat: 100 ms) after it.
// In a stall every rank meets in every round, so rounds a cycle apart kept
// each rank's engine busy (half a core to a core each); the pause keeps
// what a stall's end waits for this rank's next round within an eighth of
// the stall. A round that lasted longer than the pause waited blocked for
// a rank busy elsewhere (its heartbeat ended it): the next one waits so
// too, and that rank's submission reaches this one at once. The pause runs
// from the round's end, which every rank shares (from its start, a rank
// that waited in one round would wait as long in every next one).
std::chrono::steady_clock::time_point engine::idle_round_due() const {
  using duration = std::chrono::steady_clock::duration;
  auto pause = std::min<duration>((last_round_ - stalled_since_) / 8, heartbeat() / 10);
  if (last_round_ - round_began_ >= pause)
    pause = duration::zero();
  return last_round_ + std::max<duration>(pause, opts_.cycle_time);
}

// A round that the heartbeat started (this rank had no work): one more in
// a row for idle_heartbeat() unless it readied something or work came.
void engine::heartbeat_round(std::unique_lock<std::mutex>& lk) {
  busy_ = true;
  lk.unlock();
  bool progress = round();
  lk.lock();
  busy_ = false;
  idle_rounds_ = progress || has_work_locked() ? 0 : idle_rounds_ + 1;
  cv_.notify_all();
}

void engine::loop() {
  std::unique_lock<std::mutex> lk{mu_};
  std::chrono::steady_clock::time_point stop_began{};
  for (;;) {
    if (ended_) {
      cv_.wait(lk, [&] { return stopping_ && !busy_; });
      return;
    }
    // While another thread holds busy_ it runs the rounds, heartbeats
    // included; one of its rounds may outlast the heartbeat (a 64 MiB
    // allreduce on a 1 Gbit/s link), and a deadline already past would
    // have this thread spin on it until the round ends: wait a heartbeat
    // from now instead (the holder wakes this thread if it leaves work).
    // A rank alone has no peer to keep company: no heartbeat rounds (one
    // at start raced the first synchronous call onto the queued path).
    auto wanted = [&] { return !busy_ && (has_work_locked() || stopping_); };
    bool woken = true;
    if (topo_.size == 1) {
      cv_.wait(lk, wanted);
    } else {
      auto due = last_round_ + idle_heartbeat();
      if (busy_)
        due = std::max(due, std::chrono::steady_clock::now() + heartbeat());
      woken = cv_.wait_until(lk, due, wanted);
    }
    if (busy_)
      continue;
    if (stopping_) {
      // The last round tells the peers this rank leaves; pending work is
      // finished first, but not waited for beyond the job's timeout.
      auto now = std::chrono::steady_clock::now();
      if (stop_began == std::chrono::steady_clock::time_point{})
        stop_began = now;
      if (!has_work_locked() || now - stop_began > opts_.timeout) {
        busy_ = true;
        lk.unlock();
        if (topo_.size > 1)
          round(true);
        lk.lock();
        busy_ = false;
        return;
      }
    }
    if (!woken && std::chrono::steady_clock::now() - last_round_ < idle_heartbeat())
      continue; // a caller ran a round meanwhile
    if (!woken) {
      heartbeat_round(lk);
      continue;
    }
    idle_rounds_ = 0;
    if ((outstanding_count_ > 0 || join_) && !progress_) {
      // Peers have not caught up: the next round after a cycle, or at
      // once for new work or a waiter; once the pause grows longer than
      // the cycle (a stall), a waiter no longer cuts it short.
      auto due = idle_round_due();
      bool eager = due <= last_round_ + opts_.cycle_time;
      cv_.wait_until(lk, due, [&] {
        return busy_ || (eager && flush_ > 0) || stopping_ || submitted_since_round_;
      });
    } else if (outstanding_count_ == 0 && !incoming_.empty()) {
      // Let the batch grow for one cycle unless someone needs it now.
      auto first = incoming_.front()->submitted;
      cv_.wait_until(lk, first + opts_.cycle_time,
                     [&] { return busy_ || flush_ > 0 || stopping_ || run_closed(); });
    }
    if (busy_ || !has_work_locked() || ended_)
      continue;
    busy_ = true;
    lk.unlock();
    round();
    lk.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

// One negotiation round (collectives::negotiator describes the steps),
// then whatever it readied runs. Returns whether anything finished. Runs
// on the thread that holds busy_. `leave`: this rank's last round.
bool engine::round(bool leave) {
  std::deque<std::shared_ptr<pending_op>> fresh;
  std::shared_ptr<pending_op> join;
  {
    std::lock_guard<std::mutex> lk{mu_};
    join = join_;
    fresh.swap(incoming_);
    submitted_since_round_ = false;
    round_began_ = std::chrono::steady_clock::now();
    apply_timeline_locked();
    if (join_ && !join_told_) {
      join_told_ = true;
      negotiator_.join();
    }
  }
  auto now = std::chrono::steady_clock::now();
  if (opts_.timeline && opts_.timeline_mark_cycles && (!fresh.empty() || !outstanding_.empty())) {
    auto t = opts_.timeline->now();
    opts_.timeline->record({}, collectives::timeline_phase::cycle, t, t);
  }
  for (auto& p : fresh) {
    try {
      negotiator_.add(p->id, p->op, p->lane);
    } catch (...) {
      complete(*p, std::current_exception());
      continue;
    }
    p->proposed = now;
    outstanding_.emplace(p->id, p);
  }
  // What waited the warning time is announced by name instead of cached,
  // and an unnamed one asks every rank how far its lane got, so that this
  // round learns who has not submitted them (inspect_stalls, after it).
  bool overdue = join && stall_.overdue(now, join->submitted), query = false;
  for (auto& [id, p] : outstanding_)
    if (stall_.overdue(now, p->submitted)) {
      overdue = true;
      if (p->lane)
        query = true;
      else
        negotiator_.uncache(id);
    }
  std::vector<int64_t> header;
  std::exception_ptr transport;
  try {
    header = negotiator_.propose(stall_.gives_up(), leave, query);
    if (topo_.size > 1) {
      append_tuning(header);
      backend_->exchange_header(header.data(), header.size(), collectives::negotiator::data_word);
      adopt_tuning(header, true);
    }
  } catch (...) {
    transport = std::current_exception();
  }
  bool progress = settle(header, transport);
  if (overdue)
    inspect_stalls(join);
  return progress;
}

// After a round in which something waited the warning time: warns (every
// interval) naming what waits and the ranks that have not submitted it or
// not joined (the round learned them), and past the shutdown time has the
// next round ask every rank to abort. `join`: this rank's hvd::join() in
// progress at the round's start, or null.
void engine::inspect_stalls(const std::shared_ptr<pending_op>& join) {
  if (stall_.gives_up())
    return;
  std::vector<collectives::stall_inspector::waiting> waiting;
  for (auto& w : negotiator_.pending())
    if (auto i = outstanding_.find(w.id); i != outstanding_.end())
      waiting.push_back({w.name, w.missing, w.known, i->second->submitted});
  if (join && negotiator_.joined()) {
    auto missing = negotiator_.not_joined();
    waiting.push_back({"hvd::join()", missing, !missing.empty(), join->submitted, true});
  }
  auto verdict = stall_.check(std::chrono::steady_clock::now(), waiting);
  // Giving up is reported as Horovod's is (an error), also where no
  // warning came first (a round that outlasted the rest of the interval).
  const auto& text = verdict.shutdown ? verdict.message : verdict.warning;
  if (!text.empty()) {
    if (verdict.shutdown)
      log::error("{}", text);
    else
      log::warn("{}", text);
    log::event({{"event", "stall"}, {"rank", std::to_string(stall_.job_rank())},
                {"waiting", verdict.summary}, {"message", text},
                {"shutdown", verdict.shutdown ? "1" : "0"}});
  }
  if (verdict.shutdown) {
    std::lock_guard<std::mutex> lk{mu_};
    submitted_since_round_ = true; // the aborting round comes now
  }
}

// The rest of a round once the header came back (or the transport failed):
// the exchanges the header asks for, then what is ready runs.
bool engine::settle(std::span<const int64_t> header, std::exception_ptr transport) {
  collectives::round_result result;
  std::exception_ptr ended;
  try {
    if (transport)
      std::rethrow_exception(transport);
    auto plan = negotiator_.read(header);
    if (plan.abort) {
      ended = ending_error(plan);
    } else {
      if (plan.lane_prefix) {
        auto prefix = negotiator_.lane_prefix();
        if (topo_.size > 1)
          backend_->allreduce(prefix.data(), prefix.size(), dtype::int64, op::min);
        if (negotiator_.read_lane_prefix(prefix))
          negotiator_.explain_lane(gather_strings(negotiator_.lane_list()));
      }
      if (plan.lane_lists)
        negotiator_.read_lane_lists(gather_strings(negotiator_.lane_list()));
      if (plan.names)
        negotiator_.learn(gather_strings(negotiator_.announcements()));
      if (plan.progress) {
        auto n = static_cast<size_t>(topo_.size);
        std::vector<int64_t> all(n, negotiator_.progress());
        if (n > 1) {
          int64_t mine = negotiator_.progress();
          backend_->allgatherv(&mine, all.data(), std::vector<size_t>(n, 1), dtype::int64);
        }
        negotiator_.read_progress(all);
      }
    }
    result = negotiator_.finish(ended);
  } catch (...) {
    // The transport failed: it is unusable, and so is every pending
    // operation.
    ended = std::current_exception();
    for (auto id : negotiator_.drop_all())
      result.failed.emplace_back(id, ended);
  }
  bool progress = !result.ready.empty() || !result.failed.empty() || result.join_done;
  for (auto& [id, op] : result.zeros)
    outstanding_.emplace(id, zeros_for(op));
  execute(result);
  std::deque<std::shared_ptr<pending_op>> late;
  std::shared_ptr<pending_op> joined;
  {
    std::lock_guard<std::mutex> lk{mu_};
    outstanding_count_ = outstanding_.size();
    last_round_ = std::chrono::steady_clock::now();
    if (progress || progress_)
      stalled_since_ = last_round_;
    progress_ = progress;
    if (ended) {
      ended_ = ended;
      late.swap(incoming_);
    }
    if (join_ && (result.join_done || ended)) {
      last_joined_ = result.last_joined;
      joined = std::exchange(join_, nullptr);
    }
  }
  for (auto& p : late)
    complete(*p, ended);
  if (joined)
    complete(*joined, result.join_done ? nullptr : ended);
  return progress;
}

// A joined rank's part in `op`, which it did not submit: zeros (Horovod's;
// in device memory for a device allreduce, zeroed on the device backend's
// stream), or a barrier. A device allreduce on a rank without a device
// backend gets host zeros: backend_for() then fails it like the others.
std::shared_ptr<pending_op> engine::zeros_for(const operation& op) {
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->lane = op.name.empty();
  p->submitted = p->proposed = std::chrono::steady_clock::now();
  if (op.kind == collectives::op_kind::allreduce) {
    auto& b = op.device && device_ ? *device_ : *backend_;
    try {
      p->zeros = b.zeros(op.count * size_of(op.type));
    } catch (...) {
      // No memory for the zeros: the operation fails here as it would in
      // the backend, not the round.
      p->run = [e = std::current_exception()](collectives::backend&) { std::rethrow_exception(e); };
      return p;
    }
    p->reduce = true;
    p->data = p->zeros.get();
  } else {
    p->run = [](collectives::backend& b) { b.barrier(); };
  }
  return p;
}

// Why the ranks stop negotiating: a rank shuts down, or one gave up on a
// stall (its message, which every rank reports: gathered from the ranks).
std::exception_ptr engine::ending_error(const collectives::negotiator::plan& plan) {
  if (plan.leave)
    return std::make_exception_ptr(collective_error(fmt::format(
      "hvd: rank {} shut down its collectives (hvd::shutdown()), so rank {} ({}) can run no "
      "more collectives in this session; call hvd::shutdown() and hvd::init() again",
      plan.leaver, topo_.rank, topo_.host)));
  auto all = gather_strings(stall_.gives_up() ? stall_.shutdown_message() : std::string{});
  for (auto& m : all)
    if (!m.empty())
      return std::make_exception_ptr(collective_error(fmt::format("{} (seen on rank {} on {})", m, topo_.rank, topo_.host)));
  return std::make_exception_ptr(collective_error("hvd: the ranks gave up on stalled collectives"));
}

std::vector<std::string> engine::gather_strings(const std::string& mine) {
  auto n = static_cast<size_t>(topo_.size);
  std::vector<int64_t> lengths(n);
  int64_t my_length = static_cast<int64_t>(mine.size());
  std::vector<size_t> ones(n, 1);
  backend_->allgatherv(&my_length, lengths.data(), ones, dtype::int64);
  // Bytes travel as int32 words: Gloo has no char type here.
  // A peer's length sizes what this rank allocates: checked first (a
  // negative one read as size_t would be about 2^64).
  constexpr int64_t max_list_bytes = int64_t{64} << 20;
  std::vector<size_t> words(n);
  size_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    if (lengths[r] < 0 || lengths[r] > max_list_bytes)
      throw collective_error(fmt::format(
        "hvd: rank {} announced a list of {} bytes of collectives (0..{} expected), seen on rank "
        "{} ({}); do all ranks run the same hvactor build?",
        r, lengths[r], max_list_bytes, topo_.rank, topo_.host));
    total += words[r] = (static_cast<size_t>(lengths[r]) + 3) / 4;
  }
  std::vector<int32_t> in(words[static_cast<size_t>(topo_.rank)], 0);
  if (!mine.empty())
    std::memcpy(in.data(), mine.data(), mine.size());
  std::vector<int32_t> out(total);
  backend_->allgatherv(in.data(), out.data(), words, dtype::int32);
  std::vector<std::string> result;
  size_t offset = 0;
  for (size_t r = 0; r < n; ++r) {
    result.emplace_back(reinterpret_cast<const char*>(out.data() + offset),
                        static_cast<size_t>(lengths[r]));
    offset += words[r];
  }
  return result;
}

} // namespace hvactor::hvd::detail
