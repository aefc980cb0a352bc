// Running what a round readied, in the same order on every rank: async
// allreduces sorted into runs one reduction can carry and fused up to the
// threshold (one reduction per group, on the backend of its memory),
// everything else alone; each operation's timeline phases.
#include "collectives/engine/engine.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

#include "collectives/observe/op_stats.hpp"
#include "collectives/observe/timeline.hpp"

namespace hvactor::hvd::detail {

using collectives::operation;

namespace {

using steady_time = std::chrono::steady_clock::time_point;

int64_t ns_of(steady_time t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
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

collectives::fusion_entry entry_of(const pending_op& p) {
  return {p.op.count * size_of(p.op.type), p.op.type, p.op.reduction, p.op.device};
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
    auto began = std::chrono::steady_clock::now();
    p.run(b);
    b.finish();
    collectives::count_op(p.op.kind, b.name(), p.op.count * size_of(p.op.type), began,
                          std::chrono::steady_clock::now());
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
      auto& b = backend_for(*group[0].op);
      for (size_t i = begin; i < end; ++i)
        b.wait_ready(ops[i]->ready);
      auto began = std::chrono::steady_clock::now();
      fusion_.run(b, group);
      uint64_t bytes = 0;
      for (auto& item : group)
        bytes += item.op->count * size_of(item.op->type);
      collectives::count_op(collectives::op_kind::allreduce, b.name(), bytes, began,
                            std::chrono::steady_clock::now());
    } catch (...) {
      err = std::current_exception();
    }
    for (size_t i = begin; i < end; ++i)
      complete(*ops[i], err);
  }
}

} // namespace hvactor::hvd::detail
