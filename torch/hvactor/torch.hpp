#pragma once

/// hvd on LibTorch (horovod.torch for C++): collectives on torch::Tensor,
/// parameter and optimizer-state broadcast, and a distributed optimizer.
/// Built when CMake finds LibTorch (Debian's libtorch-dev 1.13, or a
/// LibTorch 2.x with or without CUDA); link hvactor::torch. CPU and CUDA
/// tensors of float, double, half, bfloat16, int64, int32, int16, int8,
/// uint8 and bool.

#include <functional>
#include <memory>

#include <torch/torch.h>

#include "hvactor/distributed_optimizer.hpp"
#include "hvactor/hvd.hpp"
#include "hvactor/train.hpp"

namespace hvactor::hvd {

/// Reduces `t` across ranks in place (any shape, CPU or CUDA). A
/// non-contiguous tensor is reduced through a contiguous copy. bool: sum and
/// max are "or", product and min "and", average an error. Throws
/// std::invalid_argument for other dtypes (complex, ...).
/// `f` scales the input before and the result after (Horovod's
/// prescale_factor / postscale_factor; on the GPU for CUDA tensors).
/// `wire` = compression::fp16 (Horovod's compression=Compression.fp16): a
/// float32/float64 tensor travels as float16 and is written back in its
/// own dtype (other dtypes travel as they are).
void allreduce(torch::Tensor& t, op o = op::average, scale_factors f = {},
               compression wire = compression::none);

/// A tensor allreduce in flight (allreduce_async on a torch::Tensor):
/// synchronize() it before the tensor is read. Move-only.
class tensor_handle {
public:
  tensor_handle() = default;
  /// True once the operation finished (successfully or not).
  bool ready() const {
    return h_.ready();
  }
  /// The name it was submitted under.
  const std::string& name() const {
    return h_.name();
  }

private:
  friend tensor_handle allreduce_async(torch::Tensor&, op, std::string, scale_factors);
  friend void synchronize(tensor_handle&);
  handle h_;
  torch::Tensor target_; // the caller's tensor
  torch::Tensor travel_; // what travels, when it is a copy of target_
};

/// Starts an in-place allreduce of `t` (Horovod's allreduce_async_): fused
/// with the other queued allreduces, on `t`'s device (CPU or CUDA, as
/// allreduce). `t` must stay alive and unchanged until synchronize(h).
/// `name` identifies it across ranks (empty: "allreduce.<n>").
tensor_handle allreduce_async(torch::Tensor& t, op o = op::average, std::string name = {},
                              scale_factors f = {});

/// Waits for `h`, writes the result into its tensor where a copy travelled
/// (non-contiguous, CPU-staged or int16 on NCCL), and rethrows its error.
void synchronize(tensor_handle& h);

/// Reduces every tensor of `ts` in place as one fused group (Horovod's
/// grouped_allreduce_); waits for all, then rethrows the first error.
void grouped_allreduce(std::vector<torch::Tensor>& ts, op o = op::average, scale_factors f = {},
                       compression wire = compression::none);

/// Horovod's reducescatter: reduces `t` (the same dtype and shape on every
/// rank, checked first: a collective_error on every rank naming both ranks
/// otherwise) with op::sum or op::average and returns this rank's rows of
/// the result: of dimension 0's n rows, rank r gets n / size() (+1 for the
/// first n % size() ranks), in rank order. CUDA tensors reduce on the
/// device backend (NCCL or host-staged) when the job has one, else through
/// the CPU, and come back on their device. std::invalid_argument for a
/// 0-dimensional tensor and for other ops.
torch::Tensor reducescatter(const torch::Tensor& t, op o = op::average, scale_factors f = {},
                            const std::string& name = {}, compression wire = compression::none);

/// reducescatter of every tensor of `ts`, negotiated together (Horovod's
/// grouped_reducescatter); the parts in the order of `ts`.
std::vector<torch::Tensor> grouped_reducescatter(const std::vector<torch::Tensor>& ts,
                                                 op o = op::average, scale_factors f = {},
                                                 compression wire = compression::none);

/// A tensor collective in flight whose result is a new tensor
/// (allgather_async, broadcast_async, alltoall_async, reducescatter_async
/// on tensors): synchronize() it for the result. Move-only.
class tensor_result_handle {
public:
  tensor_result_handle() = default;
  /// True once the operation finished (successfully or not).
  bool ready() const {
    return data_.ready() && (!shapes_.op_ || shapes_.ready());
  }
  /// The name it was submitted under ("allgather.noname.<n>" unnamed).
  const std::string& name() const {
    return data_.name();
  }

  // What synchronize() needs (set by the calls that return a handle).
  handle data_;
  /// The exchange of every rank's dtype and shape, checked at synchronize()
  /// (allgather, alltoall, reducescatter).
  handle shapes_;
  std::shared_ptr<detail::async_result> data_result_;
  std::shared_ptr<detail::async_result> shape_result_;
  /// What travels (kept alive until synchronize()).
  torch::Tensor source_;
  /// This rank's index and the ranks of the process set it ran on.
  int set_rank_ = 0;
  int set_size_ = 1;
  /// Builds the result from the bytes; received splits for alltoall.
  std::function<torch::Tensor(tensor_result_handle&, std::vector<int64_t>*)> finish_;
};

/// Waits for `h`, checks the ranks' shapes (a collective_error on every
/// rank naming both when they do not fit, as the synchronous calls), and
/// returns the result on the input's device; `received_splits` gets
/// alltoall_async's rows per rank.
torch::Tensor synchronize(tensor_result_handle& h, std::vector<int64_t>* received_splits = nullptr);

/// Horovod's allgather_async on a tensor: every rank's `t` concatenated
/// along dimension 0 once synchronize()d (the rules of allgather()).
tensor_result_handle allgather_async(const torch::Tensor& t, const std::string& name = {});

/// Horovod's broadcast_async: root's `t` as a new tensor once
/// synchronize()d (every rank passes root's dtype and shape).
tensor_result_handle broadcast_async(const torch::Tensor& t, int root,
                                     const std::string& name = {});

/// Horovod's alltoall_async (the rules of alltoall()); the received rows
/// per rank through synchronize()'s received_splits.
tensor_result_handle alltoall_async(const torch::Tensor& t,
                                    const std::vector<int64_t>& splits = {},
                                    const std::string& name = {});

/// Horovod's reducescatter_async (the rules of reducescatter()).
tensor_result_handle reducescatter_async(const torch::Tensor& t, op o = op::average,
                                         const std::string& name = {}, scale_factors f = {});

/// A sparse allreduce in flight (sparse_allreduce_async). Move-only.
class sparse_handle {
public:
  sparse_handle() = default;
  /// True once its gathers finished (successfully or not).
  bool ready() const {
    return indices_.ready() && values_.ready() && sizes_.ready();
  }

private:
  friend sparse_handle sparse_allreduce_async(const torch::Tensor&, op, const std::string&);
  friend torch::Tensor synchronize(sparse_handle&);
  tensor_result_handle indices_, values_, sizes_;
  torch::Tensor like_; // the input (its sizes, dtype and device)
  std::string name_;
  op op_ = op::average;
  int set_size_ = 1;
};

/// Horovod's sparse allreduce (sparse_allreduce_async) of a sparse COO
/// tensor `t` (an Embedding's gradient with sparse_grad = true): every
/// rank's indices and values are allgathered ("<name>.indices",
/// "<name>.values"; and the dense sizes, "<name>.sizes", checked: a rank
/// whose sizes differ makes every rank throw collective_error naming both),
/// and synchronize() returns them as one coalesced sparse tensor: the sum,
/// or for op::average the sum divided by the number of ranks (integers
/// truncate). Ranks may hold different numbers of entries, none included;
/// the sparse and dense dimensions must match. std::invalid_argument for a
/// dense `t` and for other ops. CUDA tensors gather as allgather does and
/// come back on their device.
sparse_handle sparse_allreduce_async(const torch::Tensor& t, op o = op::average,
                                     const std::string& name = {});

/// Waits for `h` and returns the reduced sparse tensor (coalesced).
torch::Tensor synchronize(sparse_handle& h);

/// sparse_allreduce_async and synchronize in one call.
torch::Tensor sparse_allreduce(const torch::Tensor& t, op o = op::average,
                               const std::string& name = {});

namespace detail {
/// What travels for `t` under `wire`: a float16 copy of a float32/float64
/// tensor with compression::fp16, else `t` itself.
torch::Tensor on_the_wire(const torch::Tensor& t, compression wire);
} // namespace detail

/// Horovod's alltoall: sends `splits[i]` rows (dimension 0) of `t` to rank
/// i, in order (empty `splits`: size() equal parts, so the first dimension
/// must divide by size()), and returns the rows every rank sent here,
/// concatenated in rank order; `received_splits`, when given, gets how many
/// came from each rank. Every dimension but the first must match across
/// ranks (checked first, a collective_error on every rank otherwise). CUDA
/// tensors travel on the device backend when the job has one, else through
/// the CPU, and come back on their device.
torch::Tensor alltoall(const torch::Tensor& t, const std::vector<int64_t>& splits = {},
                       std::vector<int64_t>* received_splits = nullptr);

/// Every rank's `t` concatenated along dimension 0, in rank order; the
/// first dimension may differ between ranks, the others must not. The ranks
/// first exchange their tensors' dtypes and shapes (a few words each): a
/// rank whose dtype, number of dimensions or any dimension but the first
/// differs from rank 0's makes the call throw collective_error on every
/// rank, naming both ranks and both shapes (e.g. "hvd::allgather 'w':
/// rank 1 sent shape [2, 3] but rank 0 has [2, 4]; every dimension but the
/// first must match"), before any data moves. `name` appears in messages.
/// 0-dimensional tensors gather into a 1-dimensional one of size() elements.
torch::Tensor allgather(const torch::Tensor& t, const std::string& name = {});

/// Overwrites `t` with root's. Every rank must pass root's dtype and shape:
/// they are exchanged first, and a difference throws collective_error on
/// every rank naming both ranks and both shapes. std::invalid_argument when
/// `root` is not a rank.
void broadcast(torch::Tensor& t, int root, const std::string& name = {});

/// Broadcasts every parameter from `root` (model->parameters()), so every
/// rank starts from the same weights. One exchange checks first that every
/// rank passes as many tensors as root, each of root's dtype and shape
/// (collective_error on every rank otherwise, naming the tensor's index).
void broadcast_parameters(const std::vector<torch::Tensor>& params, int root);

/// Gives every rank root's optimizer state. A rank whose optimizer has no
/// state yet first creates it as Horovod does: every parameter that
/// requires grad gets a zero gradient (left in place) and the optimizer
/// steps once (not LBFGS, which needs a closure). Sent from `root`, applied
/// on every other rank:
/// - the per-parameter state Optimizer::save writes (momentum buffers,
///   Adam's step, exp_avg, exp_avg_sq, max_exp_avg_sq, ...); a rank's own
///   state for a parameter root has none for is dropped;
/// - every param group's options, through OptimizerOptions::serialize: lr,
///   momentum, dampening, weight_decay, nesterov (SGD); lr, betas, eps,
///   weight_decay, amsgrad (Adam, AdamW); lr, alpha, eps, weight_decay,
///   momentum, centered (RMSprop); lr, lr_decay, weight_decay,
///   initial_accumulator_value, eps (Adagrad); lr, max_iter, max_eval,
///   tolerance_grad, tolerance_change, history_size, line_search_fn
///   (LBFGS). LibTorch's Optimizer::load reads the options but does not
///   apply them; this call does.
/// Not sent: the parameters themselves (broadcast_parameters) and which
/// parameters a group holds. Every rank must build the same optimizer: as
/// many param groups, as many parameters per group, the same options type;
/// a difference, or options of your own whose OptimizerOptions subclass
/// does not implement serialize(), throws collective_error on every rank
/// naming the rank and both sides. A custom optimizer's per-parameter
/// state travels only if it overrides save() and load().
void broadcast_optimizer_state(torch::optim::Optimizer& opt, int root);

/// broadcast_optimizer_state on the optimizer distributed_optimizer wraps.
void broadcast_optimizer_state(distributed_optimizer& opt, int root);

} // namespace hvactor::hvd

namespace hvactor::train {

/// A tensor as a dataset or batch column (hvactor::train): its first
/// dimension is the rows. float32, float64 and int64 are kept; other
/// floating types become float32, other integer and bool types int64. The
/// data is copied (from the CPU, a GPU tensor is copied there first).
column column_from(const at::Tensor& t, column_tag);

/// A one-element tensor as a metric (report({{"loss", loss}})): an integer
/// for integer and bool tensors, a real otherwise; std::invalid_argument
/// for any other number of elements.
value value_from(const at::Tensor& t, value_tag);

/// A column as a CPU tensor of shape {rows, inner_shape...} and the
/// column's dtype (a copy: the batch may be reused).
at::Tensor column_to(const column& c, std::type_identity<at::Tensor>);

} // namespace hvactor::train

// SyncBatchNorm and the differentiable collectives (hvd::autograd).
#include "hvactor/sync_batch_norm.hpp"
