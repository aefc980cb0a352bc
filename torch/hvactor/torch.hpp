#pragma once

/// hvd on LibTorch (horovod.torch for C++): collectives on torch::Tensor,
/// parameter and optimizer-state broadcast, and a distributed optimizer.
/// Built when CMake finds LibTorch (Debian's libtorch-dev); link
/// hvactor::torch. CPU tensors; Debian's LibTorch has no CUDA.

#include <torch/torch.h>

#include "hvactor/distributed_optimizer.hpp"
#include "hvactor/hvd.hpp"
#include "hvactor/train.hpp"

namespace hvactor::hvd {

/// Reduces `t` across ranks in place (any shape; float, double, int32,
/// int64, half). A non-contiguous tensor is reduced through a contiguous
/// copy. Throws std::invalid_argument for other dtypes and CUDA tensors.
void allreduce(torch::Tensor& t, op o = op::average);

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
