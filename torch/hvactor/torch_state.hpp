#pragma once

/// hvd::elastic::torch_state (horovod.torch.elastic.TorchState): a module,
/// its optimizer, named integer scalars (epoch, batch, ...) and named values
/// of any type (Horovod's **kwargs: a tensor, a double, a string, a list, a
/// dict, ... as LibTorch's IValue holds them) that survive a change of the
/// world. commit() keeps a copy in memory (parameters, buffers, the
/// optimizer's state and every param group's options, the scalars, the
/// values); restore() puts it back after a peer died, options included, as
/// Horovod's load_state_dict does; sync() broadcasts rank 0's to every rank
/// (broadcast_parameters, broadcast_optimizer_state; the values pickled).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hvactor/elastic.hpp"
#include "hvactor/elastic_sampler.hpp"

namespace hvactor::hvd::elastic {

class torch_state : public state {
public:
  /// `model` may be a module holder (`Net model;` from TORCH_MODULE) or a
  /// shared module; both must outlive the state.
  template <class Model>
  torch_state(Model& model, torch::optim::Optimizer& opt,
              std::map<std::string, int64_t> scalars = {},
              std::map<std::string, torch::IValue> values = {})
    : torch_state(module_of(model), opt, std::move(scalars), std::move(values), 0) {
  }

  /// The named scalar (created at 0 when new).
  int64_t& operator[](const std::string& name) {
    return scalars_[name];
  }
  const std::map<std::string, int64_t>& scalars() const noexcept {
    return scalars_;
  }

  /// The named value (created as None when new): any type an IValue holds.
  /// A tensor value is copied at commit() and comes back from rank 0 at
  /// sync() on the device of this rank's value of that name (rank 0's device
  /// when it had none).
  torch::IValue& value(const std::string& name) {
    return values_[name];
  }
  const std::map<std::string, torch::IValue>& values() const noexcept {
    return values_;
  }

  /// Keeps `s` with the state (Horovod's TorchState(..., sampler=s)): its
  /// epoch and processed count are committed, restored and synced from
  /// rank 0 with the rest, and it is reset for the current world after
  /// restore(), sync() and every reset (hvd::elastic::run's), so that it
  /// hands the indices this epoch has not processed to the new world. `s`
  /// must outlive the state.
  void track(elastic_sampler& s);

  void save() override;
  void restore() override;
  void sync() override;

private:
  torch_state(std::shared_ptr<torch::nn::Module> module, torch::optim::Optimizer& opt,
              std::map<std::string, int64_t> scalars, std::map<std::string, torch::IValue> values,
              int);

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
  std::map<std::string, torch::IValue> values_;
  std::vector<char> saved_values_; // pickled at save()
  std::vector<elastic_sampler*> samplers_;
  std::vector<elastic_sampler::state_dict> saved_samplers_;
};

} // namespace hvactor::hvd::elastic
