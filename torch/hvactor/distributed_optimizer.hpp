#pragma once

/// hvd::distributed_optimizer: Horovod's DistributedOptimizer for LibTorch.
/// Included by <hvactor/torch.hpp>.

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/torch.h>

#include "hvactor/hvd.hpp"

namespace hvactor::hvd {

/// How gradients travel in distributed_optimizer (Horovod's
/// hvd.Compression): as they are, or cast to float16 for the allreduce and
/// back afterwards (half the bytes on the wire, ~3 significant digits).
/// Gradients that are not float32/float64 travel as they are.
enum class compression { none, fp16 };

/// distributed_optimizer's knobs, Horovod's keyword arguments.
struct distributed_optimizer_options {
  /// Backward passes (each parameter's gradient hook firing) before one
  /// step(): the k-th starts the parameter's allreduce; one more before
  /// step() or synchronize() throws hvactor::error from backward(). Without
  /// `overlap` nothing is counted: step() reduces what accumulated.
  int backward_passes_per_step = 1;
  /// op::average or op::sum: gradients are reduced; op::adasum: Horovod's
  /// Adasum optimizer (_DistributedAdasumOptimizer). Each rank steps the
  /// wrapped optimizer on its own gradients as soon as a parameter's are
  /// ready (with its own optimizer state: momentum, Adam's moments), and
  /// the ranks combine their parameter deltas with Adasum; step() adds the
  /// combined delta to the parameters as they were before the local step.
  /// Adasum needs a power-of-2 number of ranks and float16/32/64
  /// parameters, the global process set, no groups and no
  /// skip_synchronize() (Horovod's limits); synchronize() does nothing.
  op reduction = op::average;
  /// Start each gradient's allreduce during backward() (hooks on the
  /// gradient accumulators); false: all of them in synchronize().
  bool overlap = true;
  compression wire = compression::none;
  /// f > 0 (only with op::average): gradients are multiplied by 1/f before
  /// the allreduce and the average by f after it, so the sum on the wire is
  /// f times smaller (fp16 gradients that would overflow 65504 do not).
  double gradient_predivide_factor = 1.0;
  /// Parameters whose allreduces start together, once every member's
  /// gradient is ready (Horovod's groups=[[...], ...]); a parameter in
  /// none travels alone. Each parameter at most once.
  std::vector<std::vector<torch::Tensor>> groups;
  /// > 0 (and no `groups`): the parameters, in order, in this many groups of
  /// nearly equal counts (Horovod's groups=N / num_groups=N).
  int num_groups = 0;
  /// A sparse gradient (an Embedding's with sparse_grad = true) is reduced
  /// as a dense tensor and written back sparse (Horovod's sparse_as_dense);
  /// false: as Horovod's sparse allreduce (sparse_allreduce_async: every
  /// rank's indices and values gathered, coalesced). A rank must produce a
  /// parameter's sparse gradient in the first step it is reduced, as in
  /// Horovod: a gradient this rank never produced is reduced as dense
  /// zeros, which only a dense reduction on the other ranks meets
  /// (sparse_as_dense meets it always).
  bool sparse_as_dense = false;
  /// The ranks whose gradients are averaged (Horovod's process_set=): a
  /// set from hvd::init(sets) or add_process_set. Its members reduce over
  /// it alone; on a rank outside it the optimizer reduces nothing and
  /// step() is the wrapped optimizer's (Horovod's). Hooks run on
  /// autograd's thread, so a process_set_scope around backward() does not
  /// reach them: pass the set here.
  hvd::process_set process_set = global_process_set();
};

/// Horovod's DistributedOptimizer: wraps any torch::optim::Optimizer and
/// averages the gradients of all its parameters (those that require grad)
/// across ranks before the wrapped optimizer steps.
///
/// Each gradient travels as one allreduce named after its parameter (the
/// names given, e.g. model->named_parameters(); without them Horovod's
/// "allreduce.noname.<group>.<index>"), so ranks whose gradients become
/// ready in different orders still pair them by name.
///
/// synchronize() finishes the reduction; step() calls it, then steps the
/// wrapped optimizer. To change the reduced gradients (clip them) first:
///   opt.synchronize();
///   torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
///   { auto skip = opt.skip_synchronize(); opt.step(); }
///
/// A parameter whose gradient this rank did not produce since the last
/// synchronize() (unused by this step's graph) is reduced as zeros, so
/// every rank submits every gradient and unused parameters never stall a
/// step (Horovod's force-allreduce).
class distributed_optimizer {
public:
  using named_tensors = torch::OrderedDict<std::string, torch::Tensor>;

  /// Default names; throws std::invalid_argument for bad options.
  explicit distributed_optimizer(torch::optim::Optimizer& inner, int backward_passes_per_step = 1,
                                 op reduction = op::average, bool overlap = true,
                                 compression wire = compression::none);
  distributed_optimizer(torch::optim::Optimizer& inner, distributed_optimizer_options options);
  /// Names from `named_parameters` (model->named_parameters()): every
  /// parameter of `inner` must be among them (std::invalid_argument naming
  /// the first one that is not); names of other tensors are ignored.
  /// (A template only so that a braced options list never reads as one.)
  template <class Named, class = std::enable_if_t<std::is_same_v<Named, named_tensors>>>
  distributed_optimizer(torch::optim::Optimizer& inner, const Named& named_parameters,
                        distributed_optimizer_options options = {})
    : distributed_optimizer(inner, &named_parameters, std::move(options)) {
  }
  ~distributed_optimizer();

  distributed_optimizer(const distributed_optimizer&) = delete;
  distributed_optimizer& operator=(const distributed_optimizer&) = delete;

  /// Clears the gradients. Throws hvactor::error between backward() and
  /// step()/synchronize() (a gradient counted or in flight), as Horovod.
  void zero_grad();

  /// Starts the allreduce of every gradient not started yet (zeros for a
  /// gradient this rank did not produce), waits for all of them and writes
  /// the results into the gradients.
  void synchronize();

  /// synchronize() unless inside skip_synchronize(), then the wrapped
  /// optimizer's step(). After synchronize() without the guard the
  /// gradients are reduced again (stderr warns once, as Horovod does).
  void step();

  /// While alive, step() does not synchronize.
  class [[nodiscard]] skip_guard {
  public:
    explicit skip_guard(distributed_optimizer& o) noexcept;
    ~skip_guard();
    skip_guard(const skip_guard&) = delete;
    skip_guard& operator=(const skip_guard&) = delete;

  private:
    distributed_optimizer& o_;
    bool before_;
  };
  /// Horovod's `with optimizer.skip_synchronize(): optimizer.step()`.
  /// Throws hvactor::error with op::adasum (Horovod: "Skipping
  /// synchronization is not supported when using Adasum optimizer.").
  skip_guard skip_synchronize();

  /// Changes backward_passes_per_step; throws std::invalid_argument for
  /// k < 1 and hvactor::error between backward() and step().
  void set_backward_passes_per_step(int passes);
  int backward_passes_per_step() const noexcept {
    return options_.backward_passes_per_step;
  }

  /// Each parameter's operation name, in the wrapped optimizer's order
  /// (every param group's parameters).
  const std::vector<std::string>& names() const noexcept {
    return names_;
  }

  torch::optim::Optimizer& inner() noexcept {
    return inner_;
  }

  /// Whether gradients are reduced during backward().
  bool overlapped() const noexcept {
    return options_.overlap;
  }

  struct state;

private:
  distributed_optimizer(torch::optim::Optimizer& inner, const named_tensors* named,
                        distributed_optimizer_options options);
  void setup(const named_tensors* named);
  void reduce_all();

  torch::optim::Optimizer& inner_;
  distributed_optimizer_options options_;
  std::vector<std::string> names_;
  std::shared_ptr<state> state_;
  bool should_synchronize_ = true;
  bool synchronized_ = false;
  bool excluded_ = false; // not a member of options_.process_set
};

} // namespace hvactor::hvd
