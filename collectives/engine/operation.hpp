#pragma once

// Internal: one collective operation described by typed fields, as Gloo's
// gloo/allreduce.h describes an allreduce (detail::AllreduceOptionsImpl).
// The engine queues it, the negotiator's name check compares it
// across ranks, the timeline records its fields, and error messages render
// it with describe(). Building one formats nothing: text is made only when
// a message or a timeline line needs it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hvactor/hvd_types.hpp"

namespace hvactor::collectives {

/// The collective an operation runs.
enum class op_kind : uint8_t {
  allreduce,
  allgather,
  broadcast,
  barrier,
  alltoall,
  /// Horovod's reducescatter: reduces the whole tensor, each rank keeps its
  /// part (reducescatter_counts).
  reducescatter,
  /// An exchange hvd::init runs among the ranks (the GPU setup).
  setup,
};

/// The last kind: values past it on the wire are malformed.
inline constexpr op_kind last_op_kind = op_kind::setup;

/// "allreduce", "allgather", ...
const char* to_string(op_kind k);

/// One collective as the engine runs it.
struct operation {
  /// Which backend call runs, and which timeline event (<BACKEND>_<KIND>)
  /// it becomes. Every rank must run the same kind at the same position.
  op_kind kind = op_kind::allreduce;

  /// Element type: picks the backend's typed reduction and, with `count`,
  /// the bytes moved. Must agree across ranks (a float32 sum on one rank
  /// against an int32 one corrupts both).
  hvd::dtype type = hvd::dtype::float32;

  /// Elements of this rank's buffer. allreduce and broadcast: the whole
  /// tensor, equal on every rank; allgather and alltoall: this rank's own
  /// contribution, which may differ per rank (so the name check compares
  /// it only where it must agree: count_is_shared()).
  size_t count = 0;

  /// allreduce and reducescatter: the reduction as the user asked for it. op::average
  /// stays average here (the engine sums, then divides once); the fusion
  /// planner groups average with sum.
  hvd::op reduction = hvd::op::sum;

  /// broadcast only: the rank whose buffer every rank receives.
  int root = 0;

  /// allreduce and reducescatter: Horovod's prescale_factor and
  /// postscale_factor (hvd::scale_factors); equal on every rank.
  double prescale = 1.0;
  double postscale = 1.0;

  /// The buffers are GPU memory: the engine runs the operation on the
  /// device backend (NCCL or host-staged) instead of Gloo, and never fuses
  /// it with host tensors.
  bool device = false;

  /// The tensor's dimensions when the caller has them (the LibTorch
  /// adapter's tensors); empty: the buffer API's, one dimension of
  /// `count`. Where the count must agree (count_is_shared()), the shapes
  /// must too, as Horovod compares them: [17, 1311] against [17, 23, 57]
  /// is an error although both hold 22287 elements.
  std::vector<int64_t> shape;

  /// The tensor's name (async allreduces: the user's name or
  /// "allreduce.<n>"); empty for the synchronous calls, which are
  /// identified by their position. Named in errors, the timeline and the
  /// name check.
  std::string name;
};

/// True when every rank must pass the same count for `op`: allreduce,
/// reducescatter, broadcast, and device allgather (equal sizes); host allgather and
/// alltoall take a different count per rank.
bool count_is_shared(const operation& op);

/// True when two ranks' operations may run together: the same kind, type,
/// device and name, and the same count, reduction and root where they
/// matter for the kind.
bool same_collective(const operation& a, const operation& b);

/// same_collective() without the name: what must agree for the backend to
/// run the two at all (shape_check).
bool same_shape(const operation& a, const operation& b);

/// Whether `a` and `b` have the same dimensions (an empty shape is [count]).
bool same_dims(const operation& a, const operation& b);

/// `op`'s dimensions as Horovod prints a shape: "[17, 1311]" ("[count]"
/// for the buffer API's).
std::string dims_of(const operation& op);

/// `op` as a message names it: "allreduce (float32 x 4, sum)",
/// "allreduce 'grad/w' (device, float16 x 10, average)",
/// "broadcast (float64 x 10, root 0)", "allgather (int64)", "barrier",
/// "reducescatter (float32 x 8, sum, prescale 0.5, postscale 2)".
std::string describe(const operation& op);

/// True for the kinds that reduce (allreduce, reducescatter): their
/// reduction and scale factors must agree across ranks.
inline bool reduces(op_kind k) {
  return k == op_kind::allreduce || k == op_kind::reducescatter;
}

/// describe(op) appended to `out`.
void describe_to(std::string& out, const operation& op);

} // namespace hvactor::collectives
