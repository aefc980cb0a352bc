#pragma once

// Private to the LibTorch adapter: an optimizer's whole state as bytes, for
// broadcast_optimizer_state and elastic::torch_state. LibTorch's
// Optimizer::save writes every param group's options (lr, momentum, betas,
// ...), but Optimizer::load reads them and throws them away; these
// functions carry the options beside the state and apply them, through the
// public virtual OptimizerOptions::serialize, so every optimizer LibTorch
// ships (and any whose options implement serialize) is covered.

#include <string>
#include <string_view>

#include <torch/torch.h>

namespace hvactor::hvd::detail {

/// `opt`'s per-parameter state (Optimizer::save) and, per param group, its
/// number of parameters, its options' type and its options. Throws
/// hvactor::error naming the group and the type when the options cannot
/// be serialized (an OptimizerOptions subclass without serialize()).
std::string save_optimizer(const torch::optim::Optimizer& opt, std::string_view call);

/// Replaces `opt`'s state with `blob`'s (save_optimizer's) and applies each
/// param group's options. Checks first that `opt` has as many param groups,
/// parameters per group and the same options types as `source` (e.g. "root
/// rank 0"); throws hvactor::error naming both sides otherwise, leaving
/// `opt` unchanged. A failure while loading leaves `opt` partly loaded.
void load_optimizer(torch::optim::Optimizer& opt, const std::string& blob, std::string_view call,
                    std::string_view source);

/// Horovod's state creation for an optimizer without state (none yet):
/// a zero gradient on every parameter that requires grad, then one step().
/// Does nothing when `opt` has state, or is LBFGS (its step needs a
/// closure).
void create_state(torch::optim::Optimizer& opt);

/// broadcast_optimizer_state's body: create_state, then root's
/// save_optimizer, loaded on every
/// other rank; then every rank tells the others whether it succeeded (one
/// small allgather), so a failure on any rank throws the same
/// collective_error, naming that rank, on every rank.
void broadcast_optimizer(torch::optim::Optimizer& opt, int root);

} // namespace hvactor::hvd::detail
