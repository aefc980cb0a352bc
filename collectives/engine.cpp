#include "internal/engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "internal/timeline.hpp"
#include "internal/knobs.hpp"
#include "internal/shape_check.hpp"

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
    check_(topo.rank, topo.host) {
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "hvd.engine");
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
  run_in_order(op, body);
}

void engine::run(const operation& op, const std::function<void(collectives::backend&)>& fn) {
  run_in_order(op, fn);
}

// The synchronous path. `body` is a reference to the caller's callable:
// the fast path runs it without copying it into a std::function.
template <class Body>
void engine::run_in_order(const operation& op, Body& body) {
  std::unique_lock<std::mutex> lk{mu_};
  if (stopping_)
    throw not_started(fmt::format("hvd: {} after hvd::shutdown()", describe(op)));
  if (queue_.empty() && !busy_) {
    // Nothing ahead of us: run here and spare the hand-off.
    busy_ = true;
    lk.unlock();
    auto err = execute_one(op, body, {});
    lk.lock();
    busy_ = false;
    // Wake the engine only if work arrived meanwhile: a needless wake-up
    // per call costs a scheduler tick on an oversubscribed machine.
    bool queued = !queue_.empty();
    lk.unlock();
    if (queued)
      cv_.notify_all();
    if (err)
      std::rethrow_exception(err);
    return;
  }
  auto p = std::make_shared<pending_op>();
  p->op = op;
  p->run = body;
  p->submitted = std::chrono::steady_clock::now();
  queue_.push_back(p);
  lk.unlock();
  cv_.notify_all();
  wait(*p);
}

std::shared_ptr<pending_op> engine::submit(operation op, void* data) {
  auto p = std::make_shared<pending_op>();
  p->op = std::move(op);
  p->fusible = true;
  p->data = data;
  p->submitted = std::chrono::steady_clock::now();
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk{mu_};
    if (stopping_)
      throw not_started(
        fmt::format("hvd: allreduce_async('{}') after hvd::shutdown()", p->op.name));
    queue_.push_back(p);
    // The engine sleeps until the queue is non-empty, then until the batch
    // closes; only the first entry and a full batch need to wake it.
    wake = queue_.size() == 1 || run_closed();
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
    auto bound = 2 * opts_.timeout + knobs::engine_wait_slack;
    auto status = p.done.wait_for(bound);
    bool dequeued = false;
    {
      std::lock_guard<std::mutex> lk{mu_};
      --flush_;
      if (status != std::future_status::ready) {
        // Still queued: drop it, so the engine never runs a closure whose
        // caller (and the buffers it captured) is gone. Already running:
        // keep waiting; every transfer under it has its own timeout.
        auto i = std::find_if(queue_.begin(), queue_.end(),
                              [&](const std::shared_ptr<pending_op>& q) { return q.get() == &p; });
        if (i != queue_.end()) {
          queue_.erase(i);
          dequeued = true;
        }
      }
    }
    if (status != std::future_status::ready && !dequeued)
      status = (p.done.wait(), std::future_status::ready);
    if (status != std::future_status::ready)
      throw collective_error(fmt::format(
        "hvd: {} on rank {} ({}) did not finish within {} s although every transfer has a "
        "timeout; the collectives engine is stuck (please report this)",
        describe(p.op), topo_.rank, topo_.host,
        std::chrono::duration_cast<std::chrono::seconds>(bound).count()));
  }
  p.done.get();
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

// True when the fusible run at the queue's front cannot grow any more.
bool engine::run_closed() const {
  std::vector<collectives::fusion_entry> run;
  for (auto& p : queue_) {
    if (!p->fusible)
      return true;
    run.push_back(entry_of(*p));
  }
  return planner_.batch_size(run) < run.size();
}

void engine::loop() {
  std::unique_lock<std::mutex> lk{mu_};
  for (;;) {
    cv_.wait(lk, [&] { return !busy_ && (!queue_.empty() || stopping_); });
    if (queue_.empty())
      return;
    auto head = queue_.front();
    if (!head->fusible) {
      queue_.pop_front();
      busy_ = true;
      lk.unlock();
      complete(*head, execute_one(head->op, head->run, head->submitted));
      lk.lock();
      busy_ = false;
      cv_.notify_all();
      continue;
    }
    // Let the batch grow for one cycle unless someone needs it now.
    cv_.wait_until(lk, head->submitted + opts_.cycle_time,
                   [&] { return flush_ > 0 || stopping_ || run_closed(); });
    std::vector<std::shared_ptr<pending_op>> run;
    std::vector<collectives::fusion_entry> entries;
    for (auto& p : queue_) {
      if (!p->fusible)
        break;
      run.push_back(p);
      entries.push_back(entry_of(*p));
    }
    size_t local = planner_.batch_size(entries);
    run.resize(local);
    busy_ = true;
    lk.unlock();
    size_t k = local;
    std::exception_ptr err;
    auto* tl = opts_.timeline;
    int64_t t0 = tl ? tl->now() : 0;
    try {
      k = negotiate(run, local);
    } catch (...) {
      err = std::current_exception();
    }
    run.resize(k);
    auto items = items_of(run);
    if (tl) {
      auto e = collectives::batch_event(items, backend_->name());
      tl->record(e, collectives::timeline_phase::queue, ns_of(run.front()->submitted), t0);
      e.failed = err != nullptr;
      tl->record(e, collectives::timeline_phase::negotiate, t0, tl->now());
    }
    lk.lock();
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(k));
    lk.unlock();
    if (err) {
      for (auto& p : run)
        complete(*p, err);
    } else {
      execute_batch(items, run);
    }
    lk.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

// Runs one operation that is not fused, on the calling thread, and waits
// for its backend; a `submitted` time (ops that were queued) adds their
// QUEUE span.
template <class Body>
std::exception_ptr engine::execute_one(const operation& op, Body& body, steady_time submitted) {
  auto* tl = opts_.timeline;
  int64_t t0 = tl ? tl->now() : 0, t1 = t0;
  std::exception_ptr err;
  try {
    if (opts_.check_names)
      agree({false, {op}});
    else
      agree_on_shapes({false, {op}});
    t1 = tl ? tl->now() : 0;
    auto& b = backend_for(op);
    body(b);
    b.finish();
  } catch (...) {
    err = std::current_exception();
  }
  if (tl) {
    collectives::timeline_event e;
    e.set_operation(op);
    e.set_backend(op.device && device_ ? device_->name() : backend_->name());
    if (submitted != steady_time{})
      tl->record(e, collectives::timeline_phase::queue, ns_of(submitted), t0);
    if (t1 != t0 && topo_.size > 1)
      tl->record(e, collectives::timeline_phase::negotiate, t0, t1);
    e.failed = err != nullptr;
    tl->record(e, collectives::timeline_phase::op, t1, tl->now());
  }
  return err;
}

// Every rank proposes how many queued allreduces it has; all take the
// smallest count, which is a prefix of the same sequence everywhere.
size_t engine::negotiate(const std::vector<std::shared_ptr<pending_op>>& run, size_t local) {
  if (opts_.check_names) {
    collectives::op_list mine{true, {}};
    mine.ops.reserve(run.size());
    for (auto& p : run)
      mine.ops.push_back(p->op);
    return agree(mine);
  }
  collectives::op_list mine{true, {}};
  mine.ops.reserve(local);
  for (size_t i = 0; i < local; ++i)
    mine.ops.push_back(run[i]->op);
  return agree_on_shapes(mine);
}

// One allreduce (min) of {f, -f, n, -n}: every rank learns the smallest and
// largest fingerprint f and list length n, and takes the same branch.
// Equal fingerprints: all n run. Different lengths (queued batches that
// timing split differently): the common prefix is compared the same way.
// Equal lengths and different fingerprints: a real mismatch; the ranks show
// each other their lists (shape_check::explain throws).
size_t engine::agree_on_shapes(const collectives::op_list& mine) {
  if (topo_.size == 1)
    return mine.ops.size();
  auto exchange = [&](const collectives::op_list& list) {
    auto f = collectives::shape_check::fingerprint(list);
    auto n = static_cast<int64_t>(list.ops.size());
    std::array<int64_t, 4> v{f, -f, n, -n};
    backend_->allreduce(v.data(), v.size(), dtype::int64, op::min);
    return std::array<int64_t, 4>{v[0], -v[1], v[2], -v[3]};
  };
  auto got = exchange(mine);
  if (got[0] == got[1])
    return mine.ops.size();
  auto compared = mine;
  if (got[2] != got[3]) {
    compared = collectives::shape_check::prefix(mine, static_cast<size_t>(std::max<int64_t>(got[2], 1)));
    got = exchange(compared);
    if (got[0] == got[1])
      return compared.ops.size();
  }
  auto all = gather_strings(collectives::name_check::encode(compared));
  std::vector<collectives::op_list> lists;
  lists.reserve(all.size());
  for (size_t r = 0; r < all.size(); ++r)
    lists.push_back(collectives::name_check::decode(all[r], static_cast<int>(r)));
  collectives::shape_check::explain(lists, topo_.rank, topo_.host);
  throw collective_error(fmt::format(
    "hvd: the ranks' collectives differ (their fingerprints do), but their lists look alike on "
    "rank {} ({}); do all ranks run the same hvactor build?",
    topo_.rank, topo_.host));
}

// HVACTOR_CHECK_NAMES: every rank shows the others what it is about to run
// (through the host backend) and name_check decides.
size_t engine::agree(const collectives::op_list& mine) {
  auto all = gather_strings(collectives::name_check::encode(mine));
  std::vector<collectives::op_list> lists;
  lists.reserve(all.size());
  for (size_t r = 0; r < all.size(); ++r)
    lists.push_back(collectives::name_check::decode(all[r], static_cast<int>(r)));
  return check_.agree(lists);
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
