#include "collectives/engine/fusion_executor.hpp"

#include <algorithm>

#include "collectives/engine/fusion_planner.hpp"

namespace hvactor::collectives {

namespace {

bool is_floating(hvd::dtype t) {
  switch (t) {
    case hvd::dtype::float16:
    case hvd::dtype::bfloat16:
    case hvd::dtype::float32:
    case hvd::dtype::float64:
      return true;
    default:
      return false;
  }
}

} // namespace

hvd::op backend_reduction(hvd::op o) {
  return o == hvd::op::average ? hvd::op::sum : o;
}

void apply_average(backend& b, void* data, size_t count, hvd::dtype t, hvd::op o, int ranks,
                   double postscale) {
  if (o == hvd::op::average && is_floating(t)) {
    // Horovod's: the average is part of the postscale factor, one
    // multiplication by (postscale / ranks) in the type's precision.
    b.multiply(data, count, t, postscale / ranks);
    return;
  }
  if (o == hvd::op::average)
    b.scale(data, count, t, ranks); // integers divide, truncating
  b.multiply(data, count, t, postscale);
}

void reduce_in_place(backend& b, void* data, size_t count, hvd::dtype t, hvd::op o, int ranks,
                     hvd::scale_factors f, int rank) {
  b.multiply(data, count, t, f.prescale_factor);
  if (o == hvd::op::adasum)
    b.adasum(data, count, t, rank, ranks);
  else
    b.allreduce(data, count, t, backend_reduction(o));
  apply_average(b, data, count, t, o, ranks, f.postscale_factor);
}

timeline_event batch_event(std::span<const fusion_item> items, const char* backend) {
  timeline_event e;
  e.op = op_kind::allreduce;
  e.set_backend(backend);
  e.tensors = static_cast<uint32_t>(items.size());
  e.has_type = !items.empty();
  if (e.has_type)
    e.type = items[0].op->type;
  for (auto& item : items) {
    e.bytes += item.op->count * hvd::size_of(item.op->type);
    e.has_type = e.has_type && item.op->type == e.type;
    e.add_name(item.op->name);
  }
  return e;
}

void fusion_executor::run(backend& b, std::span<const fusion_item> items) {
  if (items.empty())
    return;
  auto& first = *items[0].op;
  auto elem = hvd::size_of(first.type);
  int64_t t0 = timeline_ ? timeline_->now() : 0;
  if (items.size() == 1 || first.reduction == hvd::op::adasum) {
    // Adasum's coefficients are per tensor: each runs on its own.
    for (auto& item : items)
      reduce_in_place(b, item.data, item.op->count, item.op->type, item.op->reduction, ranks_,
                      {item.op->prescale, item.op->postscale}, rank_);
    b.finish();
    if (timeline_)
      timeline_->record(batch_event(items, b.name()), timeline_phase::op, t0, timeline_->now());
    return;
  }
  bool prescaled = false;
  if (!first.device) {
    parts_.clear();
    for (auto& item : items)
      parts_.push_back({item.data, item.op->count});
    // Prescaled in place: the allreduce overwrites the tensors anyway.
    for (auto& item : items)
      b.multiply(item.data, item.op->count, item.op->type, item.op->prescale);
    prescaled = true;
    if (b.allreduce_parts(parts_, first.type, backend_reduction(first.reduction))) {
      for (auto& item : items)
        apply_average(b, item.data, item.op->count, item.op->type, item.op->reduction, ranks_,
                      item.op->postscale);
      if (timeline_)
        timeline_->record(batch_event(items, b.name()), timeline_phase::op, t0, timeline_->now());
      return;
    }
  }
  size_t total = 0;
  for (auto& item : items)
    total += fusion_planner::padded(item.op->count * elem);
  char* buf = nullptr;
  if (first.device) {
    buf = static_cast<char*>(b.scratch(total));
  } else {
    // Grown with headroom (up to the threshold) so that a batch a little
    // larger than the last one does not reallocate.
    if (buffer_.size() < total)
      buffer_.resize(std::max(total, std::min(threshold_, 2 * total)));
    buf = buffer_.data();
  }
  size_t offset = 0;
  for (auto& item : items) {
    auto bytes = item.op->count * elem;
    auto padded = fusion_planner::padded(bytes);
    b.copy(buf + offset, item.data, bytes);
    if (!prescaled)
      b.multiply(buf + offset, item.op->count, item.op->type, item.op->prescale);
    b.zero(buf + offset + bytes, padded - bytes);
    offset += padded;
  }
  int64_t t1 = timeline_ ? timeline_->now() : 0;
  // One reduction for the group: its entries share the backend reduction
  // (sum and average are grouped), so the division is per entry below.
  b.allreduce(buf, total / elem, first.type, backend_reduction(first.reduction));
  int64_t t2 = timeline_ ? timeline_->now() : 0;
  offset = 0;
  for (auto& item : items) {
    auto& op = *item.op;
    auto bytes = op.count * elem;
    b.copy(item.data, buf + offset, bytes);
    apply_average(b, item.data, op.count, op.type, op.reduction, ranks_, op.postscale);
    offset += fusion_planner::padded(bytes);
  }
  b.finish();
  if (timeline_) {
    // Device backends copy and reduce asynchronously: their spans show
    // when the work was queued, and MEMCPY_OUT includes the wait for all.
    auto e = batch_event(items, b.name());
    timeline_->record(e, timeline_phase::memcpy_in, t0, t1);
    timeline_->record(e, timeline_phase::op, t1, t2);
    timeline_->record(e, timeline_phase::memcpy_out, t2, timeline_->now());
  }
}

} // namespace hvactor::collectives
