#include "hvactor/torch_state.hpp"

#include "hvactor/torch.hpp"
#include "torch/optimizer_state.hpp"

namespace hvactor::hvd::elastic {

torch_state::torch_state(std::shared_ptr<torch::nn::Module> module, torch::optim::Optimizer& opt,
                         std::map<std::string, int64_t> scalars, int)
  : module_(std::move(module)), opt_(opt), scalars_(std::move(scalars)) {
  save();
}

std::vector<torch::Tensor> torch_state::tensors() const {
  auto out = module_->parameters();
  for (auto& b : module_->buffers())
    out.push_back(b);
  return out;
}

void torch_state::save() {
  torch::NoGradGuard no_grad;
  saved_tensors_.clear();
  for (auto& t : tensors())
    saved_tensors_.push_back(t.detach().clone());
  saved_optimizer_ = hvd::detail::save_optimizer(opt_, "hvd::elastic::torch_state::save");
  saved_scalars_ = scalars_;
}

void torch_state::restore() {
  torch::NoGradGuard no_grad;
  auto now = tensors();
  for (size_t i = 0; i < now.size() && i < saved_tensors_.size(); ++i)
    now[i].copy_(saved_tensors_[i]);
  hvd::detail::load_optimizer(opt_, saved_optimizer_, "hvd::elastic::torch_state::restore",
                              "the last commit");
  scalars_ = saved_scalars_;
}

void torch_state::sync() {
  {
    torch::NoGradGuard no_grad;
    hvd::broadcast_parameters(tensors(), 0);
  }
  hvd::broadcast_optimizer_state(opt_, 0);
  // Scalars as (name, value) in rank 0's order.
  std::vector<char> blob;
  if (hvd::rank() == 0)
    blob = hvactor::detail::pack(scalars_);
  detail::broadcast_bytes(blob);
  scalars_ = std::get<0>(hvactor::detail::unpack<std::map<std::string, int64_t>>(blob));
  save();
}

} // namespace hvactor::hvd::elastic
