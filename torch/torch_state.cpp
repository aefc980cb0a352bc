#include "hvactor/torch_state.hpp"

#include "hvactor/torch.hpp"
#include "torch/optimizer_state.hpp"

namespace hvactor::hvd::elastic {

namespace {

// The named values as one pickle (a dict str -> IValue): tensors are
// written with their data, CUDA ones through the CPU.
std::vector<char> pickled(const std::map<std::string, torch::IValue>& values) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  for (auto& [name, v] : values)
    dict.insert(name, v);
  return torch::pickle_save(torch::IValue(dict));
}

// Unpickles `blob`; a tensor lands on the device of `here`'s value of its
// name when that is a tensor too.
std::map<std::string, torch::IValue> unpickled(const std::vector<char>& blob,
                                               const std::map<std::string, torch::IValue>& here) {
  std::map<std::string, torch::IValue> out;
  auto dict = torch::pickle_load(blob).toGenericDict();
  for (const auto& entry : dict) {
    auto name = entry.key().toStringRef();
    auto v = entry.value();
    auto mine = here.find(name);
    if (v.isTensor() && mine != here.end() && mine->second.isTensor())
      v = v.toTensor().to(mine->second.toTensor().device());
    out.emplace(name, std::move(v));
  }
  return out;
}

} // namespace

torch_state::torch_state(std::shared_ptr<torch::nn::Module> module, torch::optim::Optimizer& opt,
                         std::map<std::string, int64_t> scalars,
                         std::map<std::string, torch::IValue> values, int)
  : module_(std::move(module)), opt_(opt), scalars_(std::move(scalars)),
    values_(std::move(values)) {
  save();
}

std::vector<torch::Tensor> torch_state::tensors() const {
  auto out = module_->parameters();
  for (auto& b : module_->buffers())
    out.push_back(b);
  return out;
}

void torch_state::track(elastic_sampler& s) {
  samplers_.push_back(&s);
  saved_samplers_.push_back(s.state());
  // After a reset without a sync (hosts only removed), the survivors keep
  // their state but the world is smaller.
  register_reset_callback([&s] { s.reset(); });
}

void torch_state::save() {
  torch::NoGradGuard no_grad;
  saved_tensors_.clear();
  for (auto& t : tensors())
    saved_tensors_.push_back(t.detach().clone());
  saved_optimizer_ = hvd::detail::save_optimizer(opt_, "hvd::elastic::torch_state::save");
  saved_scalars_ = scalars_;
  saved_values_ = pickled(values_);
  saved_samplers_.clear();
  for (auto* s : samplers_)
    saved_samplers_.push_back(s->state());
}

void torch_state::restore() {
  torch::NoGradGuard no_grad;
  auto now = tensors();
  for (size_t i = 0; i < now.size() && i < saved_tensors_.size(); ++i)
    now[i].copy_(saved_tensors_[i]);
  hvd::detail::load_optimizer(opt_, saved_optimizer_, "hvd::elastic::torch_state::restore",
                              "the last commit");
  scalars_ = saved_scalars_;
  values_ = unpickled(saved_values_, values_);
  for (size_t i = 0; i < samplers_.size() && i < saved_samplers_.size(); ++i)
    samplers_[i]->load_state(saved_samplers_[i]);
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
  auto values = hvd::rank() == 0 ? pickled(values_) : std::vector<char>{};
  detail::broadcast_bytes(values);
  values_ = unpickled(values, values_);
  // The samplers' (epoch, processed) pairs, rank 0's.
  std::vector<int64_t> words;
  for (auto* s : samplers_)
    words.insert(words.end(), {s->state().epoch, s->state().processed_num});
  hvd::broadcast(std::span<int64_t>(words), 0);
  for (size_t i = 0; i < samplers_.size(); ++i)
    samplers_[i]->load_state({words[2 * i], words[2 * i + 1]});
  save();
}

} // namespace hvactor::hvd::elastic
