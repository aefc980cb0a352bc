#include "internal/engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "internal/binding.hpp"
#include "internal/timeline.hpp"
#include "internal/knobs.hpp"
#include "internal/log.hpp"
#include <hvactor/event.hpp>

namespace hvactor::hvd::detail {

namespace {

using collectives::operation;
using steady_time = std::chrono::steady_clock::time_point;

int64_t ns_of(steady_time t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

collectives::fusion_entry entry_of(const pending_op& p) {
  return {p.op.count * size_of(p.op.type), p.op.type, p.op.reduction, p.op.device};
}

std::vector<collectives::fusion_item>
items_of(const std::vector<std::shared_ptr<pending_op>>& ops) {
  std::vector<collectives::fusion_item> items;
  items.reserve(ops.size());
  for (auto& p : ops)
    items.push_back({&p->op, p->data});
  return items;
}

} // namespace

engine::engine(std::unique_ptr<collectives::backend> b, const collectives::topology& topo,
               engine_options opts)
  : backend_(std::move(b)),
    topo_(topo),
    opts_(opts),
    planner_(opts.fusion_threshold),
    fusion_(opts.fusion_threshold, topo.size, opts.timeline),
    negotiator_(topo.rank, topo.size, topo.host, opts.cache_capacity),
    stall_(opts.stall, topo.rank, topo.size) {
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "hvd.engine");
    // Checked by hvd::init against the cores this process may use.
    if (opts_.thread_core)
      collectives::pin_this_thread(*opts_.thread_core);
    loop();
  });
}

engine::~engine() {
  stop();
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

void engine::allreduce(const operation& op, void* data) {
  auto body = [&](collectives::backend& b) {
    collectives::reduce_in_place(b, data, op.count, op.type, op.reduction, topo_.size);
  };
  run_in_order(op, body, data, true);
}

void engine::run(const operation& op, const std::function<void(collectives::backend&)>& fn) {
  run_in_order(op, fn);
}

// Names an unnamed operation and hands it to the next round.
void engine::enqueue_locked(const std::shared_ptr<pending_op>& p) {
  p->id = next_id_++;
  if (p->op.name.empty()) {
    // Named for the handle; a synchronous call stays unnamed (its caller
    // never sees the name, and formatting one per call costs).
    p->lane = true;
    auto k = static_cast<size_t>(p->op.kind);
    auto n = noname_[k]++;
    if (p->fusible)
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
    if (op.name.empty())
      ++noname_[static_cast<size_t>(op.kind)];
    lk.unlock();
    bool done = op.name.empty() && solo(op, body, reduced, reduce);
    if (done) {
      lk.lock();
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
      cv_.wait_until(lk, last_round_ + opts_.cycle_time,
                     [&] { return submitted_since_round_ || stopping_; });
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

// The fast path (run_in_order): a round whose header carries `op` alone.
// Returns true when it ran (its error, if any, in solo_error_); false when
// the round has more to do: then `op` was queued as usual (solo_pending_)
// and the round finished with it, and the caller waits for it.
template <class Body>
bool engine::solo(const operation& op, Body& body, void* data, bool reduce) {
  auto& header = negotiator_.propose_solo(op);
  auto* tl = opts_.timeline;
  int64_t t0 = tl ? tl->now() : 0;
  std::vector<int64_t> reduced;
  std::exception_ptr transport;
  // A host allreduce small enough travels with the header in one exchange
  // where the backend can (shared memory): 0 not so, 1 agreed and reduced,
  // 2 exchanged but not agreed (the data untouched), 3 agreed but some
  // rank sent its header alone (it runs the operation separately, and so
  // does this one).
  int combined = 0;
  if (topo_.size > 1) {
    reduced = header;
    try {
      if (reduce && data && !op.device) {
        bool agreed = false;
        auto accept = [&](std::span<const int64_t> h) {
          agreed = negotiator_.solo_agreed(h);
          return agreed && h[collectives::negotiator::data_word] == 0;
        };
        if (backend_->allreduce_with_header(reduced.data(), reduced.size(),
                                            collectives::negotiator::data_word, data, op.count,
                                            op.type, collectives::backend_reduction(op.reduction),
                                            accept))
          combined = !agreed ? 2 : reduced[collectives::negotiator::data_word] == 0 ? 1 : 3;
      }
      if (combined == 0)
        backend_->allreduce(reduced.data(), reduced.size(), dtype::int64, op::min);
    } catch (...) {
      transport = std::current_exception();
    }
  }
  const auto& r = topo_.size > 1 ? reduced : header;
  if (combined == 1 || combined == 3
      || (combined == 0 && !transport && negotiator_.solo_agreed(r))) {
    int64_t t1 = tl ? tl->now() : 0;
    std::exception_ptr err;
    try {
      auto& b = backend_for(op);
      if (combined == 1)
        collectives::apply_average(b, data, op.count, op.type, op.reduction, topo_.size);
      else
        body(b);
      b.finish();
    } catch (...) {
      err = std::current_exception();
    }
    if (tl) {
      collectives::timeline_event e;
      e.set_operation(op);
      e.set_backend(op.device && device_ ? device_->name() : backend_->name());
      if (topo_.size > 1)
        tl->record(e, collectives::timeline_phase::negotiate, t0, t1);
      e.failed = err != nullptr;
      tl->record(e, collectives::timeline_phase::op, t1, tl->now());
    }
    solo_error_ = err;
    std::lock_guard<std::mutex> lk{mu_};
    progress_ = true;
    last_round_ = std::chrono::steady_clock::now();
    return true;
  }
  // Queue it as the general path would have, and finish the round.
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->run = body;
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
  settle(r, {}, transport);
  solo_pending_ = p;
  return false;
}

std::shared_ptr<pending_op> engine::submit(operation op, void* data) {
  auto p = std::make_shared<pending_op>();
  p->op = std::move(op);
  p->fusible = true;
  p->reduce = true;
  p->data = data;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (stopping_)
      throw not_started(
        fmt::format("hvd: allreduce_async('{}') after hvd::shutdown()", p->op.name));
    enqueue_locked(p);
    // The engine sleeps until there is work, then until the batch closes;
    // only the first entry and a full batch need to wake it.
    wake = incoming_.size() == 1 || run_closed();
  }
  if (wake)
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
    if (dequeued)
      throw collective_error(fmt::format(
        "hvd: {} on rank {} ({}) was not negotiated within {} s although every transfer has a "
        "timeout; the collectives engine is stuck (please report this)",
        describe(p.op), topo_.rank, topo_.host,
        std::chrono::duration_cast<std::chrono::seconds>(bound).count()));
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
    join_told_ = false;
    submitted_since_round_ = true;
  }
  lk.unlock();
  cv_.notify_all();
  drive_until(*p, lk);
  lk.lock();
  return last_joined_;
}

void engine::complete(pending_op& p, std::exception_ptr error) {
  if (error)
    p.promise.set_exception(error);
  else
    p.promise.set_value();
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

void engine::loop() {
  std::unique_lock<std::mutex> lk{mu_};
  std::chrono::steady_clock::time_point stop_began{};
  for (;;) {
    if (ended_) {
      cv_.wait(lk, [&] { return stopping_ && !busy_; });
      return;
    }
    bool woken = cv_.wait_until(lk, last_round_ + heartbeat(),
                                [&] { return !busy_ && (has_work_locked() || stopping_); });
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
    if (!woken && std::chrono::steady_clock::now() - last_round_ < heartbeat())
      continue; // a caller ran a round meanwhile
    if (!woken) {
      busy_ = true;
      lk.unlock();
      round();
      lk.lock();
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    if ((outstanding_count_ > 0 || join_) && !progress_) {
      // Peers have not caught up: the next round after a cycle, or at
      // once for new work.
      cv_.wait_until(lk, last_round_ + opts_.cycle_time, [&] {
        return busy_ || flush_ > 0 || stopping_ || submitted_since_round_;
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
  {
    std::lock_guard<std::mutex> lk{mu_};
    fresh.swap(incoming_);
    submitted_since_round_ = false;
    if (join_ && !join_told_) {
      join_told_ = true;
      negotiator_.join();
    }
  }
  auto now = std::chrono::steady_clock::now();
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
  // The stall inspector: what waits long enough is announced by name (so
  // that every rank learns who submitted it), then warned about.
  collectives::stall_inspector::verdict stall;
  if (!outstanding_.empty() && stall_.overdue(now, std::min_element(outstanding_.begin(), outstanding_.end(), [](auto& a, auto& b) { return a.second->submitted < b.second->submitted; })->second->submitted)) {
    std::vector<collectives::stall_inspector::waiting> waiting;
    for (auto& w : negotiator_.pending()) {
      auto& p = *outstanding_.at(w.id);
      if (stall_.overdue(now, p.submitted))
        negotiator_.uncache(w.id);
      waiting.push_back({w.name, w.missing, w.known, p.submitted});
    }
    stall = stall_.check(now, waiting);
    if (!stall.warning.empty()) {
      log::warn("{}", stall.warning);
      log::event({{"event", "stall"}, {"rank", std::to_string(topo_.rank)},
                  {"waiting", stall.summary}, {"message", stall.warning}});
    }
  }
  std::vector<int64_t> header;
  std::exception_ptr transport;
  try {
    header = negotiator_.propose(stall.shutdown, leave);
    if (topo_.size > 1)
      backend_->allreduce(header.data(), header.size(), dtype::int64, op::min);
  } catch (...) {
    transport = std::current_exception();
  }
  return settle(header, stall, transport);
}

// The rest of a round once the header came back (or the transport failed):
// the exchanges the header asks for, then what is ready runs.
bool engine::settle(std::span<const int64_t> header,
                    const collectives::stall_inspector::verdict& stall,
                    std::exception_ptr transport) {
  collectives::round_result result;
  std::exception_ptr ended;
  try {
    if (transport)
      std::rethrow_exception(transport);
    auto plan = negotiator_.read(header);
    if (plan.abort) {
      ended = ending_error(plan, stall);
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
    progress_ = progress;
    last_round_ = std::chrono::steady_clock::now();
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

// A joined rank's part in `op`, which it did not submit: zeros (Horovod's),
// or a barrier.
std::shared_ptr<pending_op> engine::zeros_for(const operation& op) {
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->lane = op.name.empty();
  p->submitted = p->proposed = std::chrono::steady_clock::now();
  if (op.kind == collectives::op_kind::allreduce) {
    p->zeros.assign(op.count * size_of(op.type), 0);
    p->reduce = true;
    p->data = p->zeros.data();
  } else {
    p->run = [](collectives::backend& b) { b.barrier(); };
  }
  return p;
}

// Why the ranks stop negotiating: a rank shuts down, or one gave up on a
// stall (its message, which every rank reports: gathered from the ranks).
std::exception_ptr engine::ending_error(const collectives::negotiator::plan& plan,
                                        const collectives::stall_inspector::verdict& mine) {
  if (plan.leave)
    return std::make_exception_ptr(collective_error(fmt::format(
      "hvd: rank {} shut down its collectives (hvd::shutdown()), so rank {} ({}) can run no "
      "more collectives in this session; call hvd::shutdown() and hvd::init() again",
      plan.leaver, topo_.rank, topo_.host)));
  auto all = gather_strings(mine.shutdown ? mine.message : std::string{});
  for (auto& m : all)
    if (!m.empty())
      return std::make_exception_ptr(collective_error(fmt::format("{} (seen on rank {} on {})", m, topo_.rank, topo_.host)));
  return std::make_exception_ptr(collective_error("hvd: the ranks gave up on stalled collectives"));
}

// Runs what a round readied: every rank has the same list, so the same
// batches and the same order. Async allreduces are sorted (stably) into
// runs that one reduction can carry, then fused up to the threshold;
// everything else runs alone.
void engine::execute(const collectives::round_result& r) {
  auto take = [&](uint64_t id) {
    auto i = outstanding_.find(id);
    auto p = std::move(i->second);
    outstanding_.erase(i);
    return p;
  };
  for (auto& [id, err] : r.failed) {
    auto p = take(id);
    complete(*p, err);
  }
  std::vector<std::shared_ptr<pending_op>> fusible;
  std::vector<std::shared_ptr<pending_op>> single;
  for (auto id : r.ready) {
    auto p = take(id);
    (p->reduce ? fusible : single).push_back(std::move(p));
  }
  for (auto& p : single)
    execute_one(*p);
  auto key = [](const pending_op& p) {
    return std::tuple{p.op.device, p.op.type, collectives::backend_reduction(p.op.reduction)};
  };
  auto by_key = [&](const auto& a, const auto& b) { return key(*a) < key(*b); };
  if (!std::is_sorted(fusible.begin(), fusible.end(), by_key))
    std::stable_sort(fusible.begin(), fusible.end(), by_key);
  std::vector<collectives::fusion_entry> entries;
  entries.reserve(fusible.size());
  for (auto& p : fusible)
    entries.push_back(entry_of(*p));
  auto* tl = opts_.timeline;
  for (size_t begin = 0; begin < fusible.size();) {
    auto rest = std::span<const collectives::fusion_entry>(entries).subspan(begin);
    size_t n = planner_.batch_size(rest);
    std::vector<std::shared_ptr<pending_op>> batch(fusible.begin() + static_cast<std::ptrdiff_t>(begin),
                                                   fusible.begin() + static_cast<std::ptrdiff_t>(begin + n));
    auto items = items_of(batch);
    if (tl) {
      auto e = collectives::batch_event(items, backend_->name());
      tl->record(e, collectives::timeline_phase::queue, ns_of(batch.front()->submitted),
                 ns_of(batch.front()->proposed));
      tl->record(e, collectives::timeline_phase::negotiate, ns_of(batch.front()->proposed),
                 tl->now());
    }
    execute_batch(items, batch);
    begin += n;
  }
}

// Runs one operation that is not fused, on the calling thread, and waits
// for its backend.
void engine::execute_one(pending_op& p) {
  auto* tl = opts_.timeline;
  int64_t t1 = tl ? tl->now() : 0;
  std::exception_ptr err;
  try {
    auto& b = backend_for(p.op);
    p.run(b);
    b.finish();
  } catch (...) {
    err = std::current_exception();
  }
  if (tl) {
    // A synchronous call shows as the caller wrote it (no generated name),
    // its wait as NEGOTIATE (it queues behind nothing).
    collectives::timeline_event e;
    if (p.lane) {
      auto unnamed = p.op;
      unnamed.name.clear();
      e.set_operation(unnamed);
    } else {
      e.set_operation(p.op);
    }
    e.set_backend(p.op.device && device_ ? device_->name() : backend_->name());
    if (topo_.size > 1)
      tl->record(e, collectives::timeline_phase::negotiate, ns_of(p.proposed), t1);
    e.failed = err != nullptr;
    tl->record(e, collectives::timeline_phase::op, t1, tl->now());
  }
  complete(p, err);
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

// One reduction per group of the batch (fusion_planner::groups), each on
// the backend of its memory; a group that fails fails only its entries.
void engine::execute_batch(std::span<const collectives::fusion_item> batch,
                           const std::vector<std::shared_ptr<pending_op>>& ops) {
  std::vector<collectives::fusion_entry> entries;
  entries.reserve(ops.size());
  for (auto& p : ops)
    entries.push_back(entry_of(*p));
  for (auto [begin, end] : collectives::fusion_planner::groups(entries)) {
    std::exception_ptr err;
    try {
      auto group = batch.subspan(begin, end - begin);
      fusion_.run(backend_for(*group[0].op), group);
    } catch (...) {
      err = std::current_exception();
    }
    for (size_t i = begin; i < end; ++i)
      complete(*ops[i], err);
  }
}

void engine::set_device_backend(std::unique_ptr<collectives::backend> b) {
  device_ = std::move(b);
}

} // namespace hvactor::hvd::detail
