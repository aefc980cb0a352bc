// The engine's synchronous calls (allreduce, run): while nothing else is
// pending, a round whose header carries the call alone, run on the
// caller's thread (solo), with a small host allreduce travelling in the
// header's exchange where the backend can; otherwise the call is queued
// and waited for like any other.
#include "collectives/observe/op_stats.hpp"
#include "collectives/engine/engine.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/observe/timeline.hpp"

namespace hvactor::hvd::detail {

using collectives::operation;

namespace {

// steady_clock (CLOCK_MONOTONIC) as of the kernel's last tick (1-4 ms
// behind at most): a third of the cost of a precise read.
std::chrono::steady_clock::time_point coarse_now() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point{std::chrono::duration_cast<
    std::chrono::steady_clock::duration>(std::chrono::seconds{ts.tv_sec}
                                         + std::chrono::nanoseconds{ts.tv_nsec})};
}

} // namespace

void engine::allreduce(const operation& op, void* data) {
  auto body = [&](collectives::backend& b) {
    collectives::reduce_in_place(b, data, op.count, op.type, op.reduction, topo_.size,
                                 {op.prescale, op.postscale}, topo_.rank);
  };
  run_in_order(op, body, data, true);
}

void engine::run(const operation& op, const std::function<void(collectives::backend&)>& fn) {
  run_in_order(op, fn);
}

// The synchronous path: the caller runs the rounds itself while the engine
// is idle (no hand-off to the engine's thread), else waits for it.
template <class Body>
void engine::run_in_order(const operation& op, Body& body, void* reduced, bool reduce) {
  std::unique_lock<std::mutex> lk{mu_};
  if (stopping_)
    throw not_started(fmt::format("hvd: {} after hvd::shutdown()", describe(op)));
  if (!busy_ && !ended_ && incoming_.empty() && outstanding_count_ == 0) {
    // Nothing pending anywhere here: one round for this operation alone,
    // on the caller's thread, without queueing it (the common case of a
    // synchronous call).
    busy_ = true;
    apply_timeline_locked();
    if (op.name.empty())
      ++noname_[static_cast<size_t>(op.kind)];
    lk.unlock();
    bool done = op.name.empty() && solo(op, body, reduced, reduce);
    if (done) {
      lk.lock();
      progress_ = true;
      idle_rounds_ = 0;
      last_round_ = std::max(last_round_, solo_ended_); // solo_ended_ may be a tick behind
      release_locked(lk);
      if (solo_error_)
        std::rethrow_exception(std::exchange(solo_error_, nullptr));
      return;
    }
    lk.lock();
    busy_ = false;
    if (op.name.empty())
      --noname_[static_cast<size_t>(op.kind)];
    if (solo_pending_) {
      // The round went on with it queued (solo() handed it over).
      auto p = std::exchange(solo_pending_, nullptr);
      lk.unlock();
      cv_.notify_all();
      drive_until(*p, lk);
      return;
    }
  }
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->run = body;
  p->reduce = reduce;
  p->data = reduced;
  enqueue_locked(p);
  if (ended_) {
    lk.unlock();
    p->done.get();
    return;
  }
  if (busy_) {
    lk.unlock();
    cv_.notify_all();
    wait(*p);
    return;
  }
  lk.unlock();
  drive_until(*p, lk);
}

// The fast path (run_in_order): a round whose header carries `op` alone.
// Returns true when it ran (its error, if any, in solo_error_); false when
// the round has more to do: then `op` was queued as usual (solo_pending_)
// and the round finished with it, and the caller waits for it.
template <class Body>
bool engine::solo(const operation& op, Body& body, void* data, bool reduce) {
  auto& header = negotiator_.propose_solo(op);
  auto* tl = opts_.timeline;
  int64_t t0 = tl ? tl->now() : 0;
  // A member, so that a call allocates nothing here.
  auto& reduced = solo_header_;
  std::exception_ptr transport;
  auto combined = solo_exchange_result::header_only;
  if (topo_.size > 1) {
    reduced.assign(header.begin(), header.end());
    append_tuning(reduced);
    combined = solo_exchange(op, reduced, data, reduce, transport);
    adopt_tuning(reduced, !transport);
  }
  const auto& r = topo_.size > 1 ? reduced : header;
  if (combined == solo_exchange_result::reduced || combined == solo_exchange_result::agreed_alone
      || (combined == solo_exchange_result::header_only && !transport
          && negotiator_.solo_agreed(r))) {
    solo_run(op, body, combined == solo_exchange_result::reduced, data, t0);
    return true;
  }
  solo_hand_over(op, body, data, reduce, r, transport);
  return false;
}

// Exchanges solo()'s header (reduced in place; a transport failure goes to
// `transport`). A host allreduce small enough travels with the header in
// one exchange where the backend can (shared memory): header_only: not so;
// reduced: agreed and reduced; not_agreed: exchanged but not agreed (the
// data untouched); agreed_alone: agreed but some rank sent its header
// alone (it runs the operation separately, and so does this one).
engine::solo_exchange_result engine::solo_exchange(const operation& op,
                                                   std::vector<int64_t>& header, void* data,
                                                   bool reduce, std::exception_ptr& transport) {
  using collectives::negotiator;
  auto combined = solo_exchange_result::header_only;
  try {
    // A prescaled allreduce runs apart from the header (the exchange would
    // reduce the data unscaled), and so does Adasum (no plain reduction).
    if (reduce && data && !op.device && op.prescale == 1.0 && op.reduction != hvd::op::adasum) {
      bool agreed = false;
      auto accept = [&](std::span<const int64_t> h) {
        agreed = negotiator_.solo_agreed(h.first(h.size() - tuning_words()));
        return agreed && h[negotiator::data_word] == 0;
      };
      if (backend_->allreduce_with_header(header.data(), header.size(), negotiator::data_word,
                                          data, op.count, op.type,
                                          collectives::backend_reduction(op.reduction), accept))
        combined = !agreed                            ? solo_exchange_result::not_agreed
                   : header[negotiator::data_word] == 0 ? solo_exchange_result::reduced
                                                        : solo_exchange_result::agreed_alone;
    }
    if (combined == solo_exchange_result::header_only)
      backend_->exchange_header(header.data(), header.size(), collectives::negotiator::data_word);
  } catch (...) {
    transport = std::current_exception();
  }
  return combined;
}

// Runs the operation every rank agreed on in solo() (`reduced`: the
// exchange already summed it; only an average's division is left), records
// its timeline phases, and ends the round.
template <class Body>
void engine::solo_run(const operation& op, Body& body, bool reduced, void* data,
                      int64_t negotiated_at) {
  auto* tl = opts_.timeline;
  int64_t t1 = tl ? tl->now() : 0;
  std::exception_ptr err;
  std::chrono::steady_clock::time_point ended{};
  try {
    auto& b = backend_for(op);
    // Reduced in the header's exchange, the operation has no time of its
    // own (an average's division at most): the last clock tick stands for
    // its start and end (two precise reads were a seventh of a small call;
    // what its end is for, the heartbeat and the op stats' reports, counts
    // in ms and more).
    auto began = reduced ? coarse_now() : std::chrono::steady_clock::now();
    if (reduced)
      collectives::apply_average(b, data, op.count, op.type, op.reduction, topo_.size,
                                 op.postscale);
    else
      body(b);
    b.finish();
    ended = reduced ? began : std::chrono::steady_clock::now();
    collectives::count_op(op.kind, b.name(), op.count * size_of(op.type), began, ended);
  } catch (...) {
    err = std::current_exception();
  }
  if (!err)
    observe_tuning(op, true);
  if (tl) {
    collectives::timeline_event e;
    e.set_operation(op);
    e.set_backend(op.device && device_ ? device_->name() : backend_->name());
    if (topo_.size > 1)
      tl->record(e, collectives::timeline_phase::negotiate, negotiated_at, t1);
    e.failed = err != nullptr;
    tl->record(e, collectives::timeline_phase::op, t1, tl->now());
  }
  solo_error_ = err;
  // The call's end stands for the round's (one clock read less per call);
  // run_in_order records it under the lock it takes anyway.
  solo_ended_ = err || tl ? std::chrono::steady_clock::now() : ended;
}

// Queues solo()'s operation as the general path would have, and finishes
// the round with the exchanged `header` (or the transport's failure).
void engine::solo_hand_over(const operation& op, std::function<void(collectives::backend&)> run,
                            void* data, bool reduce, std::span<const int64_t> header,
                            std::exception_ptr transport) {
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->run = std::move(run);
  p->reduce = reduce;
  p->data = data;
  p->lane = true;
  {
    std::lock_guard<std::mutex> lk{mu_};
    p->id = next_id_++;
    ++noname_[static_cast<size_t>(op.kind)];
  }
  p->submitted = p->proposed = std::chrono::steady_clock::now();
  negotiator_.absorb_solo(p->id, p->op);
  outstanding_.emplace(p->id, p);
  settle(header, transport);
  solo_pending_ = p;
}

} // namespace hvactor::hvd::detail
