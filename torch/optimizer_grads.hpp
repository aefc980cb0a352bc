#pragma once

// Private to the LibTorch adapter: how distributed_optimizer reduces one
// parameter's gradient (or, with op::adasum, its delta): dense allreduce
// (compressed, prescaled, on the tensor's path: host, device or a CPU
// copy), or a sparse gradient's allgather of indices and values.

#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hvactor/torch.hpp"

namespace hvactor::hvd::detail {

/// How every gradient travels, fixed at construction.
struct wire_plan {
  op reduction = op::average;
  compression wire = compression::none;
  double predivide = 1.0;
  bool sparse_as_dense = false;
  /// The optimizer's set; empty: the global one (no scope needed).
  std::optional<process_set> set;
};

/// One reduction in flight: the handle and what must outlive it: the
/// tensor written at the end, the float16 copy that travels with
/// compression, the CPU copy that travels for a CUDA tensor in a job
/// without a device backend; a sparse gradient's allgather instead.
struct grad_in_flight {
  handle h;
  torch::Tensor target;
  torch::Tensor wire;
  torch::Tensor staged;
  /// Sparse allreduce (not sparse_as_dense): the parameter whose gradient
  /// becomes the result, and the gather.
  torch::Tensor param;
  std::optional<sparse_handle> sparse;
  /// sparse_as_dense: the result is written back as a sparse gradient
  /// with the gradient's sparse dimensions (an Embedding's: rows), > 0.
  int64_t to_sparse = 0;
};

/// Starts the reduction of `p`'s gradient under `name`: zeros when this
/// rank has none (made contiguous in place), prescaled by 1 / predivide.
grad_in_flight start_grad(torch::Tensor& p, const wire_plan& plan, const std::string& name);

/// Starts an in-place allreduce of `t` itself (a delta) with the plan's op
/// and compression.
grad_in_flight start_tensor(const torch::Tensor& t, const wire_plan& plan, const std::string& name);

/// Horovod's Adasum optimizer, for parameter `p` (contiguous): keeps `p`
/// in `start` (allocated on first use), steps `inner` on `p` alone (a zero
/// gradient where this rank has none), turns `p` into the local delta and
/// starts its in-place Adasum allreduce. After finish_grad, `p` + `start`
/// is the new parameter.
grad_in_flight start_delta(torch::optim::Optimizer& inner, torch::Tensor& p, torch::Tensor& start,
                           const wire_plan& plan, const std::string& name);

/// Waits for it and writes the result where it belongs (decompressed,
/// postscaled; a sparse result into the parameter's gradient).
void finish_grad(grad_in_flight& f, const wire_plan& plan);

/// Waits for every one (the buffers must outlive the operations), then
/// rethrows the first error; `fs` is empty afterwards.
void finish_all(std::vector<grad_in_flight>& fs, const wire_plan& plan);

} // namespace hvactor::hvd::detail
