#pragma once

/// hvd::elastic::torch_state (horovod.torch.elastic.TorchState): a module,
/// its optimizer and named integer scalars (epoch, batch, ...) that survive
/// a change of the world. commit() keeps a copy in memory (parameters,
/// buffers, the optimizer's state and every param group's options, the
/// scalars); restore() puts it back after a peer died, options included, as
/// Horovod's load_state_dict does; sync() broadcasts rank 0's to every rank
/// (broadcast_parameters, broadcast_optimizer_state).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hvactor/elastic.hpp"

namespace hvactor::hvd::elastic {

class torch_state : public state {
public:
  /// `model` may be a module holder (`Net model;` from TORCH_MODULE) or a
  /// shared module; both must outlive the state.
  template <class Model>
  torch_state(Model& model, torch::optim::Optimizer& opt,
              std::map<std::string, int64_t> scalars = {})
    : torch_state(module_of(model), opt, std::move(scalars), 0) {
  }

  /// The named scalar (created at 0 when new).
  int64_t& operator[](const std::string& name) {
    return scalars_[name];
  }
  const std::map<std::string, int64_t>& scalars() const noexcept {
    return scalars_;
  }

  void save() override;
  void restore() override;
  void sync() override;

private:
  torch_state(std::shared_ptr<torch::nn::Module> module, torch::optim::Optimizer& opt,
              std::map<std::string, int64_t> scalars, int);

  template <class M>
  static std::shared_ptr<torch::nn::Module> module_of(torch::nn::ModuleHolder<M>& holder) {
    return holder.ptr();
  }
  template <class M>
  static std::shared_ptr<torch::nn::Module> module_of(std::shared_ptr<M>& module) {
    return module;
  }

  /// Parameters and buffers, in the module's order.
  std::vector<torch::Tensor> tensors() const;

  std::shared_ptr<torch::nn::Module> module_;
  torch::optim::Optimizer& opt_;
  std::map<std::string, int64_t> scalars_;
  std::vector<torch::Tensor> saved_tensors_;
  std::string saved_optimizer_;
  std::map<std::string, int64_t> saved_scalars_;
};

} // namespace hvactor::hvd::elastic
