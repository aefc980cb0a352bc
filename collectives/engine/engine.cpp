// The engine's calling side: construction and stop, queueing an operation
// for the next round (submit), and waiting for one: driving the rounds on
// the caller's thread while the engine is idle, or waiting for the thread
// that drives them (wait, join). The synchronous fast path is in
// engine_sync.cpp, the rounds in engine_rounds.cpp, running what they
// readied in engine_execute.cpp.
#include "collectives/observe/op_stats.hpp"
#include "collectives/engine/engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <future>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/backends/binding.hpp"
#include "base/internal/knobs_collectives.hpp"

namespace hvactor::hvd::detail {

using collectives::operation;

engine::engine(std::unique_ptr<collectives::backend> b, const collectives::topology& topo,
               engine_options opts)
  : backend_(std::move(b)),
    topo_(topo),
    opts_(opts),
    planner_(opts.fusion_threshold),
    fusion_(opts.fusion_threshold, topo.size, opts.timeline, topo.rank),
    negotiator_(topo.rank, topo.size, topo.host, opts.cache_capacity),
    stall_(opts.stall, topo.rank, topo.size) {
  start_tuning();
  // The first heartbeat round a heartbeat from now: one at once held the
  // rounds (busy_) as the program's first calls came, which then took the
  // queued path, each a hand-off between threads; under a load that forks
  // short processes, the first milliseconds of small allreduces took 1-3
  // ms a call now and then.
  last_round_ = std::chrono::steady_clock::now();
  // hvd::init returns with the engine thread named and pinned: a caller
  // that looks at its threads right after init sees them as they stay.
  std::promise<void> ready;
  auto started = ready.get_future();
  thread_ = std::thread([this, &ready] {
    ::pthread_setname_np(::pthread_self(), "hvd.engine");
    // Checked by hvd::init against the cores this process may use.
    if (opts_.thread_core)
      collectives::pin_this_thread(*opts_.thread_core);
    ready.set_value();
    loop();
  });
  started.wait();
}

engine::~engine() {
  stop();
  collectives::report_op_stats(std::chrono::steady_clock::duration::zero());
}

void engine::stop() {
  {
    std::lock_guard<std::mutex> lk{mu_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

// Names an unnamed operation and hands it to the next round.
void engine::enqueue_locked(const std::shared_ptr<pending_op>& p) {
  p->id = next_id_++;
  p->process_set = opts_.process_set_id;
  if (p->op.name.empty()) {
    // Named for the handle; a synchronous call stays unnamed (its caller
    // never sees the name, and formatting one per call costs).
    p->lane = true;
    auto k = static_cast<size_t>(p->op.kind);
    auto n = noname_[k]++;
    if (p->fusible || p->async)
      p->op.name = collectives::negotiator::noname(p->op.kind, n);
  }
  p->submitted = std::chrono::steady_clock::now();
  if (ended_) {
    complete(*p, ended_);
    return;
  }
  incoming_.push_back(p);
  submitted_since_round_ = true;
}

// Runs rounds on the calling thread until `p` finished (or hands over to a
// thread that holds busy_), then rethrows its error. `lk` is unlocked.
void engine::drive_until(pending_op& p, std::unique_lock<std::mutex>& lk) {
  using namespace std::chrono_literals;
  lk.lock();
  if (busy_) {
    lk.unlock();
    wait(p);
    return;
  }
  busy_ = true;
  while (p.done.wait_for(0s) != std::future_status::ready) {
    if (!progress_ && !submitted_since_round_)
      cv_.wait_until(lk, idle_round_due(), [&] { return submitted_since_round_ || stopping_; });
    lk.unlock();
    round();
    lk.lock();
  }
  release_locked(lk);
  p.done.get();
}

// A caller gives the rounds back (busy_) and unlocks `lk`; it wakes the
// engine only if work is left: a needless wake-up per call costs a
// scheduler tick on an oversubscribed machine.
void engine::release_locked(std::unique_lock<std::mutex>& lk) {
  busy_ = false;
  bool left = has_work_locked();
  lk.unlock();
  if (left)
    cv_.notify_all();
}

std::shared_ptr<pending_op> engine::submit(operation op, void* data,
                                           std::shared_ptr<void> ready) {
  auto p = std::make_shared<pending_op>();
  p->op = std::move(op);
  p->fusible = true;
  p->reduce = true;
  p->data = data;
  p->ready = std::move(ready);
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (stopping_)
      throw not_started(
        fmt::format("hvd: allreduce_async('{}') after hvd::shutdown()", p->op.name));
    hold_name(*p);
    enqueue_locked(p);
    // The engine sleeps until there is work, then until the batch closes;
    // only the first entry and a full batch need to wake it.
    wake = incoming_.size() == 1 || run_closed();
  }
  if (wake)
    cv_.notify_all();
  return p;
}

std::shared_ptr<pending_op> engine::submit_run(operation op,
                                               std::function<void(collectives::backend&)> fn) {
  auto p = std::make_shared<pending_op>();
  p->op = std::move(op);
  p->async = true;
  p->run = std::move(fn);
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (stopping_)
      throw not_started(fmt::format("hvd: {}_async after hvd::shutdown()", to_string(p->op.kind)));
    hold_name(*p);
    enqueue_locked(p);
  }
  cv_.notify_all();
  return p;
}

void engine::wait(pending_op& p) {
  using namespace std::chrono_literals;
  if (p.done.wait_for(0s) != std::future_status::ready) {
    {
      std::lock_guard<std::mutex> lk{mu_};
      ++flush_;
    }
    cv_.notify_all();
    // Negotiated operations wait for their peers as long as those live
    // (every round's exchange has the transport's timeout); only one that
    // never reached a round is given up, so that no closure runs after its
    // caller left.
    auto bound = 2 * opts_.timeout + knobs::engine_wait_slack;
    auto status = p.done.wait_for(bound);
    bool dequeued = false;
    {
      std::lock_guard<std::mutex> lk{mu_};
      --flush_;
      if (status != std::future_status::ready) {
        auto i = std::find_if(incoming_.begin(), incoming_.end(),
                              [&](const std::shared_ptr<pending_op>& q) { return q.get() == &p; });
        if (i != incoming_.end()) {
          incoming_.erase(i);
          dequeued = true;
        }
      }
    }
    if (dequeued) {
      release_name(p);
      throw collective_error(fmt::format(
        "hvd: {} on rank {} ({}) was not negotiated within {} s although every transfer has a "
        "timeout; the collectives engine is stuck (please report this)",
        describe(p.op), topo_.rank, topo_.host,
        std::chrono::duration_cast<std::chrono::seconds>(bound).count()));
    }
    p.done.wait();
  }
  p.done.get();
}

int engine::join() {
  std::unique_lock<std::mutex> lk{mu_};
  if (stopping_)
    throw not_started("hvd: join() after hvd::shutdown()");
  if (ended_)
    std::rethrow_exception(ended_);
  if (topo_.size == 1)
    return 0;
  auto p = join_;
  if (!p) {
    // Joined from here on: this rank's rounds go on until every rank joined.
    p = join_ = std::make_shared<pending_op>();
    p->submitted = std::chrono::steady_clock::now(); // the stall inspector's clock
    join_told_ = false;
    submitted_since_round_ = true;
  }
  lk.unlock();
  cv_.notify_all();
  drive_until(*p, lk);
  lk.lock();
  return last_joined_;
}

void engine::set_timeline(collectives::timeline* tl, bool mark_cycles) {
  // The timeline is read only by whoever holds busy_. Idle: swap now.
  // Busy: the next holder swaps it when it takes busy_ (a busy engine may
  // hand busy_ from round to round without this thread ever seeing it
  // free), and this call returns once it did.
  std::unique_lock<std::mutex> lk{mu_};
  next_timeline_ = tl;
  next_mark_cycles_ = mark_cycles;
  timeline_swap_ = true;
  if (!busy_) {
    apply_timeline_locked();
    return;
  }
  submitted_since_round_ = true; // have the engine run a round soon
  cv_.notify_all();
  while (timeline_swap_ && busy_)
    cv_.wait_for(lk, std::chrono::milliseconds(1));
  apply_timeline_locked();
}

void engine::apply_timeline_locked() {
  if (!timeline_swap_)
    return;
  timeline_swap_ = false;
  opts_.timeline = next_timeline_;
  opts_.timeline_mark_cycles = next_mark_cycles_;
  fusion_.set_timeline(next_timeline_);
}

void engine::hold_name(pending_op& p) {
  if (p.op.name.empty())
    return;
  std::lock_guard<std::mutex> lk{names_mu_};
  if (!names_in_flight_.insert(p.op.name).second)
    throw std::invalid_argument(fmt::format(
      "hvd: {} was requested on rank {} ({}) with the name of an operation still in flight there; "
      "names must be unique among the operations in flight: synchronize the first, or use "
      "another name",
      describe(p.op), topo_.rank, topo_.host));
  p.holds_name = true;
}

void engine::release_name(pending_op& p) {
  if (!p.holds_name)
    return;
  std::lock_guard<std::mutex> lk{names_mu_};
  names_in_flight_.erase(p.op.name);
  p.holds_name = false;
}

void engine::complete(pending_op& p, std::exception_ptr error) {
  // Free before the waiter wakes: it may reuse the name at once.
  release_name(p);
  if (error) {
    p.promise.set_exception(error);
  } else {
    observe_tuning(p.op, p.lane);
    p.promise.set_value();
  }
}

collectives::backend& engine::backend_for(const operation& op) {
  if (!op.device)
    return *backend_;
  if (!device_)
    throw error(fmt::format("hvd: {} on rank {} ({}): device memory, but this process has no GPU "
                            "backend (see hvd::gpu_backend())",
                            describe(op), topo_.rank, topo_.host));
  return *device_;
}

void engine::set_device_backend(std::unique_ptr<collectives::backend> b) {
  device_ = std::move(b);
}

} // namespace hvactor::hvd::detail
