#include "hvactor/distributed_optimizer.hpp"

#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include "torch/grad_schedule.hpp"
#include "torch/optimizer_grads.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::hvd {

namespace {

constexpr const char* who = "hvd::distributed_optimizer";

using detail::finish_all;
using detail::grad_in_flight;
using detail::start_grad;
using detail::wire_plan;

} // namespace

// Shared with the gradient hooks, which run on autograd's thread (the
// caller's for CPU tensors) while synchronize() runs on the caller's: locked.
struct distributed_optimizer::state {
  struct param {
    torch::Tensor tensor;
    std::string name;
    std::shared_ptr<torch::autograd::Node> accumulator; // kept alive: it holds the hook
    uintptr_t hook = 0;
  };

  state(std::vector<param> ps, detail::grad_schedule s, wire_plan w)
    : params(std::move(ps)), schedule(std::move(s)), plan(w) {
  }

  std::mutex mu;
  std::vector<param> params; // those that require grad, in the optimizer's order
  detail::grad_schedule schedule;
  wire_plan plan;
  std::vector<grad_in_flight> in_flight; // in launch order
  std::vector<size_t> in_flight_ids;      // the parameter of each
  // op::adasum (Horovod's Adasum optimizer): the wrapped optimizer, stepped
  // per parameter as its gradient is ready, and each parameter before it.
  torch::optim::Optimizer* adasum = nullptr;
  std::vector<torch::Tensor> starts;

  // Starts parameter j's reduction (locked).
  void start(size_t j) {
    auto& p = params[j];
    in_flight.push_back(adasum ? detail::start_delta(*adasum, p.tensor, starts[j], plan, p.name)
                               : start_grad(p.tensor, plan, p.name));
    in_flight_ids.push_back(j);
  }

  // Waits for every reduction in flight; with Adasum, every parameter
  // started becomes start + the combined delta (start again where the
  // reduction failed: the step is lost, not the parameters).
  void finish(std::vector<grad_in_flight>& fs, const std::vector<size_t>& ids) {
    if (!adasum) {
      finish_all(fs, plan);
      return;
    }
    torch::NoGradGuard no_grad;
    try {
      finish_all(fs, plan);
    } catch (...) {
      for (auto j : ids)
        params[j].tensor.copy_(starts[j]);
      throw;
    }
    for (auto j : ids)
      params[j].tensor.add_(starts[j]);
  }

  // A hook: backward produced parameter i's gradient.
  void on_gradient(size_t i) {
    std::lock_guard<std::mutex> guard{mu};
    if (schedule.exhausted(i))
      throw error(fmt::format(
        "{}: the gradient of {} was computed more than backward_passes_per_step times before "
        "step() (backward_passes_per_step = {}); raise it to accumulate gradients locally",
        who, params[i].name, passes));
    for (auto j : schedule.on_gradient(i))
      start(j);
  }

  int passes = 1;
};

namespace {

struct grad_ready_hook : torch::autograd::FunctionPostHook {
  grad_ready_hook(std::weak_ptr<distributed_optimizer::state> st, size_t index)
    : st_(std::move(st)), index_(index) {
  }
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    if (auto st = st_.lock())
      st->on_gradient(index_);
    return outputs;
  }

private:
  std::weak_ptr<distributed_optimizer::state> st_;
  size_t index_;
};

std::string shape_of(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

using param = distributed_optimizer::state::param;
using named_tensors = distributed_optimizer::named_tensors;

// Refuses options Horovod refuses, and those that contradict each other.
void check_options(const distributed_optimizer_options& o) {
  if (o.backward_passes_per_step < 1)
    throw std::invalid_argument(fmt::format("{}: backward_passes_per_step must be >= 1: Got {}.",
                                            who, o.backward_passes_per_step));
  if (o.reduction != op::average && o.reduction != op::sum && o.reduction != op::adasum)
    throw std::invalid_argument(
      fmt::format("{}: gradients are combined with op::average, op::sum or op::adasum", who));
  if (!(std::isfinite(o.gradient_predivide_factor) && o.gradient_predivide_factor > 0))
    throw std::invalid_argument(fmt::format(
      "{}: gradient_predivide_factor must be a finite number > 0: Got {}.", who,
      o.gradient_predivide_factor));
  if (o.gradient_predivide_factor != 1.0 && o.reduction != op::average)
    throw std::invalid_argument(
      fmt::format("{}: gradient_predivide_factor {} needs op::average (Horovod: not supported "
                  "with op != Average)",
                  who, o.gradient_predivide_factor));
  if (o.num_groups < 0)
    throw std::invalid_argument(
      fmt::format("{}: num_groups must be >= 0: Got {}.", who, o.num_groups));
  if (o.process_set.id() < 0)
    throw std::invalid_argument(fmt::format(
      "{}: {} was not added (hvd::init(sets) or hvd::add_process_set) or was removed", who,
      o.process_set.to_string()));
  if (o.num_groups > 0 && !o.groups.empty())
    throw std::invalid_argument(
      fmt::format("{}: pass groups or num_groups, not both ({} groups given, num_groups {})", who,
                  o.groups.size(), o.num_groups));
}

// Horovod's limits of its Adasum optimizer, on the ranks and parameters
// known at construction.
void check_adasum(const distributed_optimizer_options& o, const std::vector<param>& params) {
  if (o.process_set.id() != 0)
    throw std::invalid_argument(fmt::format(
      "{}: op::adasum on {}: Adasum does not support non-global process sets yet (Horovod)", who,
      o.process_set.to_string()));
  if (!o.groups.empty() || o.num_groups > 0)
    throw std::invalid_argument(fmt::format(
      "{}: op::adasum reduces each parameter on its own; groups and num_groups do not apply",
      who));
  int n = is_initialized() ? size() : 1;
  if (n & (n - 1))
    throw std::invalid_argument(fmt::format(
      "{}: op::adasum with {} ranks: Running Adasum with non-power of 2 ranks is not supported "
      "yet (Horovod)",
      who, n));
  for (auto& p : params) {
    auto t = p.tensor.scalar_type();
    if (t != torch::kFloat && t != torch::kDouble && t != torch::kHalf)
      throw std::invalid_argument(fmt::format(
        "{}: op::adasum: parameter {} is {}; Adasum supports float16, float32 and float64", who,
        p.name, c10::toString(t)));
    if (!p.tensor.is_contiguous())
      throw std::invalid_argument(fmt::format(
        "{}: op::adasum: parameter {} is not contiguous; the Adasum optimizer reduces parameters "
        "in place",
        who, p.name));
  }
}

// The optimizer's parameters that need gradients, each once, named by
// Horovod's rule (by position in the param groups) or by the caller's
// `named`. `names` gets every parameter's name, `index_of` each kept
// tensor's index in the result.
std::vector<param> named_params(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                const named_tensors* named, std::vector<std::string>& names,
                                std::unordered_map<const void*, size_t>& index_of) {
  std::unordered_map<const void*, std::string> given;
  if (named)
    for (auto& item : *named)
      given.emplace(item.value().unsafeGetTensorImpl(), item.key());
  std::vector<param> params;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t j = 0; j < groups[g].params().size(); ++j) {
      const auto& p = groups[g].params()[j];
      std::string name;
      if (named) {
        auto it = given.find(p.unsafeGetTensorImpl());
        if (it == given.end())
          throw std::invalid_argument(fmt::format(
            "{}: named_parameters was given, but parameter {} of param group {} (shape {}) is "
            "not among them; pass the named_parameters() of the model the optimizer holds",
            who, j, g, shape_of(p)));
        name = it->second;
      } else {
        name = fmt::format("allreduce.noname.{}.{}", g, j);
      }
      names.push_back(name);
      if (p.requires_grad() && !index_of.count(p.unsafeGetTensorImpl())) {
        index_of.emplace(p.unsafeGetTensorImpl(), params.size());
        params.push_back({p, std::move(name), nullptr, 0});
      }
    }
  return params;
}

// The units the schedule reduces together: num_groups even splits, or the
// caller's groups (tensors the optimizer does not hold get indices past
// every parameter).
std::vector<std::vector<size_t>>
schedule_units(const distributed_optimizer_options& o, size_t count,
               const std::unordered_map<const void*, size_t>& index_of) {
  std::vector<size_t> ids(count);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = i;
  if (o.num_groups > 0)
    return detail::grad_schedule::split(ids, o.num_groups);
  std::vector<std::vector<size_t>> explicit_groups;
  size_t outside = count; // past every index: a tensor the optimizer does not hold
  for (auto& grp : o.groups) {
    explicit_groups.emplace_back();
    for (auto& t : grp) {
      auto it = index_of.find(t.unsafeGetTensorImpl());
      explicit_groups.back().push_back(it == index_of.end() ? outside++ : it->second);
    }
  }
  return detail::grad_schedule::with_groups(ids, explicit_groups);
}

// Overlap: a hook on each leaf parameter's gradient accumulator starts its
// allreduce as soon as the gradient is ready (others are reduced in
// synchronize()).
void add_hooks(const std::shared_ptr<distributed_optimizer::state>& st) {
  for (size_t i = 0; i < st->params.size(); ++i) {
    auto& p = st->params[i];
    if (!p.tensor.is_leaf())
      continue; // reduced in synchronize()
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    if (!p.accumulator)
      continue;
    p.hook = p.accumulator->add_post_hook(
      std::make_unique<grad_ready_hook>(std::weak_ptr<distributed_optimizer::state>(st), i));
  }
}

} // namespace

distributed_optimizer::distributed_optimizer(torch::optim::Optimizer& inner,
                                             int backward_passes_per_step, op reduction,
                                             bool overlap, compression wire)
  : inner_(inner) {
  options_.backward_passes_per_step = backward_passes_per_step;
  options_.reduction = reduction;
  options_.overlap = overlap;
  options_.wire = wire;
  setup(nullptr);
}

distributed_optimizer::distributed_optimizer(torch::optim::Optimizer& inner,
                                             distributed_optimizer_options options)
  : inner_(inner), options_(std::move(options)) {
  setup(nullptr);
}

distributed_optimizer::distributed_optimizer(torch::optim::Optimizer& inner,
                                             const named_tensors* named,
                                             distributed_optimizer_options options)
  : inner_(inner), options_(std::move(options)) {
  setup(named);
}

void distributed_optimizer::setup(const named_tensors* named) {
  auto& o = options_;
  check_options(o);
  std::unordered_map<const void*, size_t> index_of; // into params
  auto params = named_params(inner_.param_groups(), named, names_, index_of);
  auto units = schedule_units(o, params.size(), index_of);
  bool adasum = o.reduction == op::adasum;
  if (adasum)
    check_adasum(o, params);
  detail::grad_schedule schedule{params.size(), std::move(units), o.backward_passes_per_step};
  wire_plan plan{o.reduction, o.wire, o.gradient_predivide_factor, o.sparse_as_dense, {}};
  if (o.process_set.id() != 0)
    plan.set = o.process_set;
  // (The global set includes every rank, also before hvd::init().)
  excluded_ = o.process_set.id() != 0 && !o.process_set.included();
  state_ = std::make_shared<state>(std::move(params), std::move(schedule), std::move(plan));
  state_->passes = o.backward_passes_per_step;
  if (adasum) {
    state_->adasum = &inner_;
    state_->starts.resize(state_->params.size());
  }
  if (o.overlap && !excluded_)
    add_hooks(state_);
}

distributed_optimizer::~distributed_optimizer() {
  // The parameters outlive this optimizer: take the hooks off, and let any
  // allreduce still in flight finish before its gradient may go away.
  for (auto& p : state_->params)
    if (p.accumulator)
      p.accumulator->del_post_hook(p.hook);
  try {
    state_->finish(state_->in_flight, state_->in_flight_ids);
  } catch (const std::exception&) {
    // A destructor must not throw; the error was the caller's to see.
  }
}

void distributed_optimizer::zero_grad() {
  {
    std::lock_guard<std::mutex> guard{state_->mu};
    if (!state_->schedule.idle() || !state_->in_flight.empty())
      throw error(fmt::format(
        "{}: zero_grad() was called after backward() but before step() or synchronize(); "
        "gradients counted for the next reduction would be lost (Horovod refuses this too)",
        who));
  }
  inner_.zero_grad();
}

void distributed_optimizer::synchronize() {
  if (excluded_ || state_->adasum) { // Horovod: nothing to do
    synchronized_ = true;
    return;
  }
  reduce_all();
  synchronized_ = true;
}

// Starts every reduction not started yet and waits for all of them.
void distributed_optimizer::reduce_all() {
  auto& st = *state_;
  std::vector<grad_in_flight> pending;
  std::vector<size_t> ids;
  {
    std::lock_guard<std::mutex> guard{st.mu};
    try {
      for (auto j : st.schedule.flush())
        st.start(j);
    } catch (...) {
      try {
        st.finish(st.in_flight, st.in_flight_ids);
      } catch (const std::exception&) {
        // The launch failure is the one to report.
      }
      st.in_flight_ids.clear();
      throw;
    }
    pending.swap(st.in_flight);
    ids.swap(st.in_flight_ids);
  }
  st.finish(pending, ids);
}

void distributed_optimizer::step() {
  if (state_->adasum && !excluded_) {
    // Each parameter stepped locally as its delta started; the combined
    // deltas now replace them.
    reduce_all();
    synchronized_ = false;
    return;
  }
  if (should_synchronize_) {
    if (synchronized_) {
      static std::once_flag warned;
      std::call_once(warned, [] {
        std::fprintf(stderr,
                     "hvactor: warning: hvd::distributed_optimizer::step() was called after "
                     "synchronize() outside skip_synchronize(), so the gradients are reduced "
                     "again; use { auto skip = opt.skip_synchronize(); opt.step(); }\n");
      });
    }
    synchronize();
  }
  synchronized_ = false;
  inner_.step();
}

void distributed_optimizer::set_backward_passes_per_step(int passes) {
  std::lock_guard<std::mutex> guard{state_->mu};
  if (!state_->schedule.idle() || !state_->in_flight.empty())
    throw error(fmt::format("{}: set_backward_passes_per_step() between backward() and step(); "
                            "call it before the next backward()",
                            who));
  state_->schedule.set_passes(passes);
  state_->passes = passes;
  options_.backward_passes_per_step = passes;
}

distributed_optimizer::skip_guard distributed_optimizer::skip_synchronize() {
  if (state_->adasum)
    throw error(fmt::format("{}: Skipping synchronization is not supported when using Adasum "
                            "optimizer (op::adasum; Horovod's message)",
                            who));
  return skip_guard{*this};
}

distributed_optimizer::skip_guard::skip_guard(distributed_optimizer& o) noexcept
  : o_(o), before_(o.should_synchronize_) {
  o_.should_synchronize_ = false;
}

distributed_optimizer::skip_guard::~skip_guard() {
  o_.should_synchronize_ = before_;
}

} // namespace hvactor::hvd
