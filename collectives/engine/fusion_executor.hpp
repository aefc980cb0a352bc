#pragma once

// Internal: how the engine runs allreduces. reduce_in_place() and
// apply_average() are the one recipe for op::average (a sum, then one
// division by the number of ranks on the backend that reduced), for the
// synchronous and the queued paths, host and device. fusion_executor runs
// one group of a fused batch (Horovod's fusion buffer).

#include <cstddef>
#include <span>
#include <vector>

#include "collectives/backends/backend.hpp"
#include "collectives/engine/operation.hpp"
#include "collectives/observe/timeline.hpp"

namespace hvactor::collectives {

/// The reduction a backend runs for `o`: op::average is a sum (the
/// division follows in apply_average()).
hvd::op backend_reduction(hvd::op o);

/// After a backend_reduction(o): the `count` elements at `data` on `b`
/// multiplied by `postscale` (hvd::scale_factors; 1: nothing), and for
/// op::average divided by `ranks`, the only place where op::average
/// divides. Floating types multiply once by postscale / ranks, as
/// Horovod folds the average into the postscale factor (the same bits);
/// integers divide (truncating toward zero), then multiply.
void apply_average(backend& b, void* data, size_t count, hvd::dtype t, hvd::op o, int ranks,
                   double postscale = 1.0);

/// Allreduces `count` elements at `data` in place on `b` with `o`
/// (average: sum, then apply_average()). Device work is queued, not waited
/// for: the caller calls b.finish().
/// `f`'s prescale factor multiplies the input first, its postscale factor
/// the result (apply_average()).
/// op::adasum runs b.adasum() as rank `rank` of `ranks` (on the host, also
/// for device memory).
void reduce_in_place(backend& b, void* data, size_t count, hvd::dtype t, hvd::op o, int ranks,
                     hvd::scale_factors f = {}, int rank = 0);

/// One tensor of a fused batch: its descriptor and its buffer.
struct fusion_item {
  /// Not owned; outlives the call it is passed to.
  const operation* op = nullptr;
  void* data = nullptr;
};

/// The timeline's view of `items` (a batch of allreduces) on the backend
/// named `backend`: their names, the fused count, bytes, and the dtype
/// when they share one.
timeline_event batch_event(std::span<const fusion_item> items, const char* backend);

/// Runs the groups of a fused batch. Owns the host fusion buffer; device
/// groups pack into the device backend's scratch buffer. Not thread-safe:
/// the engine runs one group at a time.
class fusion_executor {
public:
  /// `threshold`: HOROVOD_FUSION_THRESHOLD, which bounds how far the host
  /// buffer grows ahead of need; `ranks`: the divisor of op::average;
  /// `tl`: records spans when set (not owned, outlives this).
  fusion_executor(size_t threshold, int ranks, timeline* tl, int rank = 0)
    : threshold_(threshold), ranks_(ranks), rank_(rank), timeline_(tl) {
  }

  /// Allreduces `items`, one group of fusion_planner::groups() (one dtype,
  /// one backend reduction, one kind of memory), on `b` and waits for it:
  /// a single item in place; more through the fusion buffer: packed
  /// (padded to fusion_planner::atomic_unit), reduced once, copied out and
  /// averaged. Records MEMCPY_IN / <BACKEND>_ALLREDUCE / MEMCPY_OUT spans.
  /// Throws what the backend throws.
  void run(backend& b, std::span<const fusion_item> items);

  /// Records into `tl` from now on (the engine swaps it between rounds).
  void set_timeline(timeline* tl) {
    timeline_ = tl;
  }

  /// Autotune's new threshold (the buffer grows up to it as batches need).
  void set_threshold(size_t bytes) {
    threshold_ = bytes;
  }

private:
  size_t threshold_;
  int ranks_;
  /// This rank (Adasum's place in the pairs).
  int rank_;
  timeline* timeline_;
  std::vector<char> buffer_;
  std::vector<buffer_part> parts_;
};

} // namespace hvactor::collectives
