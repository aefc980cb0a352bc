// The LibTorch adapter in real workers: collectives on tensors, parameter
// and optimizer-state broadcast, and the distributed optimizer against
// single-process training on the concatenated batch.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <sstream>
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// LibTorch first: it defines glog's CHECK, which must not replace doctest's.
#include <hvactor/torch.hpp>
#include <hvactor/torch_state.hpp>

#include "torch/grad_schedule.hpp"
#include "torch_shards.hpp"
#undef CHECK
#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "test_main.hpp"

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

using hvactor::test::shard_of;

std::vector<float> flat(torch::nn::Linear& l) {
  auto w = torch::cat({l->weight.detach().flatten(), l->bias.detach().flatten()});
  return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
}

// In a worker: Linear(2,2) seeded by rank, broadcast from 0, SGD lr 0.01
// wrapped in the distributed optimizer; `passes` micro-batches (backward
// passes) per step, as Horovod's loop: zero_grad, k x backward, step.
// `setter`: constructed with 1 pass, then set_backward_passes_per_step.
std::vector<float> train_linear(int steps, int passes, bool overlap, bool setter = false) {
  hvd::init();
  torch::manual_seed(hvd::rank() + 1); // different on every rank until broadcast
  torch::nn::Linear l(2, 2);
  hvd::broadcast_parameters(l->parameters(), 0);
  torch::optim::SGD sgd(l->parameters(), 0.01);
  hvd::distributed_optimizer opt(sgd, setter ? 1 : passes, hvd::op::average, overlap);
  if (setter)
    opt.set_backward_passes_per_step(passes);
  if (opt.overlapped() != overlap)
    throw std::runtime_error("overlapped() does not say what was asked");
  auto [x, y] = shard_of(hvd::rank());
  auto xs = x.chunk(passes), ys = y.chunk(passes);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    for (int p = 0; p < passes; ++p)
      torch::mse_loss(l(xs[p]), ys[p]).backward();
    opt.step();
  }
  auto out = flat(l);
  hvd::shutdown();
  return out;
}

// The reference: one process, rank 0's initial weights, the whole batch.
std::vector<float> train_single(int ranks, int steps, int passes) {
  torch::manual_seed(1);
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.01);
  std::vector<std::vector<torch::Tensor>> xs(passes), ys(passes);
  for (int r = 0; r < ranks; ++r) {
    auto [x, y] = shard_of(r);
    auto cx = x.chunk(passes), cy = y.chunk(passes);
    for (int p = 0; p < passes; ++p) {
      xs[p].push_back(cx[p]);
      ys[p].push_back(cy[p]);
    }
  }
  for (int s = 0; s < steps; ++s) {
    sgd.zero_grad();
    // Averaging over ranks of per-shard means == the mean over the batch
    // (equal shards); micro-batch gradients accumulate.
    for (int p = 0; p < passes; ++p)
      torch::mse_loss(l(torch::cat(xs[p])), torch::cat(ys[p])).backward();
    sgd.step();
  }
  return flat(l);
}

// In a worker: tensor collectives; returns what each produced.
std::vector<double> tensor_ops() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<double> out;
  auto a = torch::full({2, 3}, float(r + 1));
  hvd::allreduce(a, hvd::op::sum);
  out.push_back(a.sum().item<double>()); // 6 * n(n+1)/2
  auto t = torch::arange(6, torch::kDouble).reshape({2, 3}).t(); // non-contiguous
  t.add_(r);
  hvd::allreduce(t, hvd::op::average);
  out.push_back(t[2][1].item<double>()); // 5 + (n-1)/2
  auto g = hvd::allgather(torch::full({r + 1, 2}, int64_t{r}, torch::kLong));
  out.push_back(double(g.size(0)));      // n(n+1)/2 rows
  out.push_back(g.sum().item<double>()); // sum of 2 r (r+1)
  auto b = torch::full({4}, float(r * 10));
  hvd::broadcast(b, n - 1);
  out.push_back(b[3].item<double>()); // 10 (n-1)
  hvd::shutdown();
  return out;
}

// The key of `p`'s entry in Optimizer::state(): LibTorch 1.x keys it by the
// TensorImpl's address printed as text, 2.x by the address itself.
template <class Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// In a worker: SGD with momentum; only rank 0 has state (one step) before
// broadcast_optimizer_state; returns a hash of the serialized state.
std::vector<double> optimizer_state() {
  hvd::init();
  torch::manual_seed(7);
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  if (hvd::rank() == 0) {
    torch::mse_loss(l(torch::ones({1, 2})), torch::zeros({1, 2})).backward();
    sgd.step();
  }
  hvd::broadcast_optimizer_state(sgd, 0);
  torch::serialize::OutputArchive archive;
  sgd.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  hvd::shutdown();
  // The momentum buffers' values, which rank 0 alone computed.
  std::vector<double> sums;
  for (auto& p : l->parameters()) {
    auto i = sgd.state().find(state_key<std::decay_t<decltype(sgd.state())>::key_type>(p));
    sums.push_back(i == sgd.state().end()
                     ? -1.0
                     : static_cast<torch::optim::SGDParamState&>(*i->second)
                         .momentum_buffer()
                         .sum()
                         .item<double>());
  }
  return sums;
}

// In a worker: one step on p (zeros, 3 float32 elements) with
// loss = sum(p * (1.0001 + rank)), so the averaged gradient is
// 1.0001 + (n-1)/2 per element; returns the gradient the optimizer left.
std::vector<float> compressed_grad(bool overlap, bool fp16) {
  hvd::init();
  auto p = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD sgd({p}, 1.0);
  hvd::distributed_optimizer opt(sgd, 1, hvd::op::average, overlap,
                                 fp16 ? hvd::compression::fp16 : hvd::compression::none);
  opt.zero_grad();
  (p * (1.0001f + static_cast<float>(hvd::rank()))).sum().backward();
  opt.step();
  auto g = p.grad().contiguous();
  std::vector<float> out(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  if (g.scalar_type() != torch::kFloat)
    out.clear();
  hvd::shutdown();
  return out;
}

// In a worker: k + 1 backward() calls before one step() with
// backward_passes_per_step k (overlap): the error's text ("" if none), then
// zero_grad()'s before step() ("" if none).
std::vector<std::string> double_backward(int k) {
  hvd::init();
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.01);
  hvd::distributed_optimizer opt(sgd, k);
  std::vector<std::string> texts(2);
  opt.zero_grad();
  try {
    for (int i = 0; i <= k; ++i)
      torch::mse_loss(l(torch::ones({1, 2})), torch::zeros({1, 2})).backward();
  } catch (const std::exception& e) {
    texts[0] = e.what();
  }
  try {
    opt.zero_grad();
  } catch (const std::exception& e) {
    texts[1] = e.what();
  }
  opt.step();
  opt.zero_grad(); // fine again after step()
  hvd::shutdown();
  return texts;
}

// In a worker: one collective whose tensors differ between ranks 0 and 1
// (`mode`), then one that matches; returns the first one's error text
// ("collective_error: ...", "other: ...", or "none") and whether the second
// one worked.
std::vector<std::string> mismatched(int mode) {
  hvd::init();
  int r = hvd::rank();
  std::string text = "none";
  try {
    if (mode == 0) // allgather: dimension 1 differs
      hvd::allgather(torch::zeros({2, r == 0 ? 4 : 3}), "rows");
    else if (mode == 1) // allgather: number of dimensions differs
      hvd::allgather(r == 0 ? torch::zeros({2, 3}) : torch::zeros({6}), "rows");
    else if (mode == 2) // allgather: dtype differs
      hvd::allgather(torch::zeros({2, 3}, r == 0 ? torch::kFloat : torch::kDouble), "rows");
    else if (mode == 3) { // broadcast: shape differs
      auto t = torch::zeros({r == 0 ? 4 : 3});
      hvd::broadcast(t, 0, "w");
    } else if (mode == 4) { // broadcast: dtype differs
      auto t = torch::zeros({4}, r == 0 ? torch::kFloat : torch::kLong);
      hvd::broadcast(t, 0, "w");
    } else if (mode == 5) { // broadcast_parameters: one parameter more on rank 1
      std::vector<torch::Tensor> ps{torch::zeros({2}), torch::zeros({3})};
      if (r == 1)
        ps.push_back(torch::zeros({1}));
      hvd::broadcast_parameters(ps, 0);
    } else if (mode == 6) { // broadcast_parameters: the second one's shape differs
      std::vector<torch::Tensor> ps{torch::zeros({2}), torch::zeros({3, r == 0 ? 2 : 5})};
      hvd::broadcast_parameters(ps, 0);
    }
  } catch (const hvactor::collective_error& e) {
    text = std::string("collective_error: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("other: ") + e.what();
  }
  auto after = hvd::allgather(torch::full({1, 2}, float(r)));
  bool ok = after.size(0) == hvd::size() && after[1][0].item<float>() == 1.0f;
  hvd::shutdown();
  return {text, ok ? "then ok" : "then wrong"};
}

// Rank-dependent optimizer options, so that broadcast_optimizer_state has
// something to fix.
torch::optim::SGDOptions sgd_options(int rank, int group) {
  double g = group;
  return torch::optim::SGDOptions(0.1 * (rank + 1) + g)
    .momentum(0.5 + 0.1 * rank + 0.01 * g)
    .dampening(rank == 0 ? 0.0 : 0.2)
    .weight_decay(0.01 * rank + 0.001 * g)
    .nesterov(rank == 0);
}

torch::optim::AdamOptions adam_options(int rank, int group) {
  double g = group;
  return torch::optim::AdamOptions(0.01 * (rank + 1) + 0.001 * g)
    .betas(std::make_tuple(0.8 + 0.05 * rank, 0.99 - 0.001 * rank - 0.0001 * g))
    .eps(1e-8 * (rank + 1))
    .weight_decay(0.02 * rank + 0.003 * g)
    .amsgrad(rank == 0);
}

// The options of every param group as numbers.
std::vector<double> options_of(torch::optim::Optimizer& opt) {
  std::vector<double> out;
  for (auto& g : opt.param_groups()) {
    if (auto* o = dynamic_cast<torch::optim::SGDOptions*>(&g.options()))
      out.insert(out.end(), {o->lr(), o->momentum(), o->dampening(), o->weight_decay(),
                             double(o->nesterov())});
    else if (auto* a = dynamic_cast<torch::optim::AdamOptions*>(&g.options()))
      out.insert(out.end(), {a->lr(), std::get<0>(a->betas()), std::get<1>(a->betas()), a->eps(),
                             a->weight_decay(), double(a->amsgrad())});
  }
  return out;
}

// In a worker: two Linear layers in two param groups of SGD (`adam`: Adam)
// whose options differ per rank. Before the broadcast, rank 0 steps with
// gradients on the first layer only, the others on both (so they hold
// state root has none of). Returns the options after
// broadcast_optimizer_state, then the parameters after one distributed
// step.
std::vector<double> optimizer_options(bool adam) {
  hvd::init();
  int r = hvd::rank();
  torch::manual_seed(3);
  torch::nn::Linear a(2, 2), b(2, 2);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (adam)
    opt = std::make_unique<torch::optim::Adam>(
      std::vector<torch::optim::OptimizerParamGroup>{
        {a->parameters(), std::make_unique<torch::optim::AdamOptions>(adam_options(r, 0))},
        {b->parameters(), std::make_unique<torch::optim::AdamOptions>(adam_options(r, 1))}},
      adam_options(r, 0));
  else
    opt = std::make_unique<torch::optim::SGD>(
      std::vector<torch::optim::OptimizerParamGroup>{
        {a->parameters(), std::make_unique<torch::optim::SGDOptions>(sgd_options(r, 0))},
        {b->parameters(), std::make_unique<torch::optim::SGDOptions>(sgd_options(r, 1))}},
      sgd_options(r, 0));
  auto x = torch::ones({1, 2}) * (r + 1);
  auto loss = r == 0 ? a(x).sum() : (a(x) + b(x)).sum();
  loss.backward();
  opt->step();
  opt->zero_grad();
  hvd::broadcast_parameters(a->parameters(), 0);
  hvd::broadcast_parameters(b->parameters(), 0);
  hvd::broadcast_optimizer_state(*opt, 0);
  auto out = options_of(*opt);
  hvd::distributed_optimizer dist(*opt, 1, hvd::op::average, false);
  dist.zero_grad();
  torch::mse_loss(b(a(x)), torch::zeros({1, 2})).backward();
  dist.step();
  for (auto* l : {&a, &b})
    for (auto v : flat(*l))
      out.push_back(v);
  hvd::shutdown();
  return out;
}

// Options that cannot be serialized (no serialize() of their own).
struct plain_options : torch::optim::OptimizerCloneableOptions<plain_options> {
  double lr = 0.1;
  double get_lr() const override {
    return lr;
  }
  void set_lr(const double v) override {
    lr = v;
  }
};

struct plain_optimizer : torch::optim::Optimizer {
  explicit plain_optimizer(std::vector<torch::Tensor> ps)
    : Optimizer(std::move(ps), std::make_unique<plain_options>()) {
  }
  torch::Tensor step(LossClosure) override {
    return {};
  }
};

// In a worker: broadcast_optimizer_state on optimizers it cannot handle
// (`mode` 0: options without serialize(); 1: SGD on rank 0, Adam on the
// others; 2: two param groups on rank 0, one elsewhere); the error text.
std::string optimizer_refused(int mode) {
  hvd::init();
  int r = hvd::rank();
  torch::nn::Linear a(2, 2), b(2, 2);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (mode == 0)
    opt = std::make_unique<plain_optimizer>(a->parameters());
  else if (mode == 1 && r != 0)
    opt = std::make_unique<torch::optim::Adam>(a->parameters());
  else
    opt = std::make_unique<torch::optim::SGD>(a->parameters(), 0.1);
  if (mode == 2 && r == 0)
    opt->add_param_group({b->parameters()});
  std::string text = "none";
  try {
    hvd::broadcast_optimizer_state(*opt, 0);
  } catch (const hvactor::collective_error& e) {
    text = std::string("collective_error: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("other: ") + e.what();
  }
  hvd::barrier();
  hvd::shutdown();
  return text;
}

// In a worker: each LibTorch optimizer with an lr of 0.1 (rank + 1); the
// lr of each after broadcast_optimizer_state from rank 1.
std::vector<double> every_optimizer_lr() {
  hvd::init();
  double lr = 0.1 * (hvd::rank() + 1);
  torch::nn::Linear l(2, 2);
  std::vector<std::unique_ptr<torch::optim::Optimizer>> opts;
  opts.push_back(std::make_unique<torch::optim::SGD>(l->parameters(), lr));
  opts.push_back(std::make_unique<torch::optim::Adam>(l->parameters(), lr));
  opts.push_back(std::make_unique<torch::optim::AdamW>(l->parameters(), lr));
  opts.push_back(std::make_unique<torch::optim::RMSprop>(l->parameters(), lr));
  opts.push_back(std::make_unique<torch::optim::Adagrad>(l->parameters(), lr));
  opts.push_back(std::make_unique<torch::optim::LBFGS>(
    l->parameters(), torch::optim::LBFGSOptions(lr).history_size(10 + hvd::rank())));
  std::vector<double> out;
  for (auto& o : opts) {
    hvd::broadcast_optimizer_state(*o, 1);
    out.push_back(o->param_groups()[0].options().get_lr());
  }
  auto& lbfgs = static_cast<torch::optim::LBFGSOptions&>(opts.back()->param_groups()[0].options());
  out.push_back(double(lbfgs.history_size()));
  hvd::shutdown();
  return out;
}

// In a worker: whether two named async allreduces submitted in opposite
// orders on rank 0 and the others pair by name (false while the engine
// pairs them by submission order).
bool names_pair() {
  hvd::init();
  std::vector<float> a{1.0f}, b{100.0f};
  std::vector<hvd::handle> hs;
  auto submit = [&](std::vector<float>& v, const char* name) {
    hs.push_back(hvd::allreduce_async(std::span<float>(v), hvd::op::sum, name));
  };
  if (hvd::rank() == 0) {
    submit(a, "probe.a");
    submit(b, "probe.b");
  } else {
    submit(b, "probe.b");
    submit(a, "probe.a");
  }
  for (auto& h : hs)
    hvd::synchronize(h);
  auto n = static_cast<float>(hvd::size());
  std::vector<float> mine{a[0] == n && b[0] == 100 * n ? 1.0f : 0.0f};
  auto all = hvd::allgather(std::span<const float>(mine));
  hvd::shutdown();
  for (auto v : all)
    if (v != 1.0f)
      return false;
  return true;
}

// A trunk and three heads of one shape; which heads a step uses depends on
// the rank and the step, so some parameters are unused on some ranks.
struct branchy_net : torch::nn::Module {
  torch::nn::Linear trunk{nullptr}, a{nullptr}, b{nullptr}, c{nullptr};
  branchy_net() {
    trunk = register_module("trunk", torch::nn::Linear(2, 3));
    a = register_module("a", torch::nn::Linear(3, 2));
    b = register_module("b", torch::nn::Linear(3, 2));
    c = register_module("c", torch::nn::Linear(3, 2));
  }
  // 0: head a; 1: head b; 2: a + c.
  torch::Tensor forward(const torch::Tensor& x, int branch) {
    auto h = torch::relu(trunk(x));
    return branch == 0 ? a(h) : branch == 1 ? b(h) : a(h) + c(h);
  }
};

int branch_of(int rank, int step) {
  return (rank + step) % 3;
}

std::vector<float> flat(torch::nn::Module& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m.parameters())
    ps.push_back(p.detach().flatten());
  auto w = torch::cat(ps);
  return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
}

constexpr int branchy_steps = 6;

// In a worker: branchy_net (seed 5) with SGD (lr 0.1, momentum 0.9) in the
// distributed optimizer named by named_parameters(). `mode` 0: reduced at
// step(); 1: overlap, one group of every parameter (so every allreduce
// starts in synchronize(), in order); 2: at step() in 2 groups; 3: overlap
// (ranks submit in different orders: needs pairing by name); 4: overlap,
// heads a and b in an explicit group (idem).
std::vector<float> branchy_train(int mode) {
  hvd::init();
  torch::manual_seed(5);
  branchy_net net;
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  hvd::distributed_optimizer_options o;
  o.overlap = mode == 1 || mode >= 3;
  o.num_groups = mode == 1 ? 1 : mode == 2 ? 2 : 0;
  if (mode == 4)
    o.groups = {{net.a->weight, net.b->weight, net.a->bias, net.b->bias}};
  hvd::distributed_optimizer opt(sgd, net.named_parameters(), o);
  auto [x, y] = shard_of(hvd::rank());
  for (int s = 0; s < branchy_steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(net.forward(x, branch_of(hvd::rank(), s)), y).backward();
    opt.step();
  }
  auto out = flat(net);
  hvd::shutdown();
  return out;
}

// The reference: one process; step s of `steps` sums the gradients of the
// ranks that have data for it (`has_data`; zeros for the others and for a
// parameter a rank did not use) and divides by all the ranks.
std::vector<float> branchy_reference(int ranks, int steps,
                                     const std::function<bool(int, int)>& has_data) {
  torch::manual_seed(5);
  branchy_net net;
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  auto params = net.parameters();
  for (int s = 0; s < steps; ++s) {
    std::vector<torch::Tensor> sum;
    for (auto& p : params)
      sum.push_back(torch::zeros_like(p));
    for (int r = 0; r < ranks; ++r) {
      if (!has_data(r, s))
        continue;
      for (auto& p : params)
        p.mutable_grad() = torch::Tensor();
      auto [x, y] = shard_of(r);
      torch::mse_loss(net.forward(x, branch_of(r, s)), y).backward();
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].grad().defined())
          sum[i] += params[i].grad();
    }
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() = sum[i] / ranks;
    sgd.step();
  }
  return flat(net);
}

std::vector<float> branchy_single(int ranks) {
  return branchy_reference(ranks, branchy_steps, [](int, int) { return true; });
}

// Uneven data: rank r trains branchy_net for 3 + r steps (overlap or
// not), then joins (the others' gradients then average with its zeros),
// then every rank takes the parameters of the last rank to join (Horovod's
// idiom: hvd.broadcast_parameters(..., root_rank=hvd.join())). Returns the
// parameters and, last, join()'s result.
std::vector<float> branchy_join(bool overlap) {
  hvd::init();
  torch::manual_seed(5);
  branchy_net net;
  torch::optim::SGD sgd(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  hvd::distributed_optimizer opt(sgd, net.named_parameters(), {.overlap = overlap});
  auto [x, y] = shard_of(hvd::rank());
  for (int s = 0; s < 3 + hvd::rank(); ++s) {
    opt.zero_grad();
    torch::mse_loss(net.forward(x, branch_of(hvd::rank(), s)), y).backward();
    opt.step();
  }
  int last = hvd::join();
  hvd::broadcast_parameters(net.parameters(), last);
  auto out = flat(net);
  out.push_back(static_cast<float>(last));
  hvd::shutdown();
  return out;
}

// The reference: rank r has data for steps 0 .. 3 + r - 1.
std::vector<float> branchy_join_single(int ranks) {
  return branchy_reference(ranks, 3 + ranks - 1, [](int r, int s) { return s < 3 + r; });
}

constexpr double clip_norm = 0.05;

// In a worker: Linear(2,2) (seed 1) with SGD lr 0.1; each step reduces the
// gradients with synchronize(), clips their norm to clip_norm, then steps
// inside skip_synchronize().
std::vector<float> clip_between(bool sum) {
  hvd::init();
  torch::manual_seed(1);
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  hvd::distributed_optimizer opt(sgd, l->named_parameters(),
                                 {.reduction = sum ? hvd::op::sum : hvd::op::average});
  auto [x, y] = shard_of(hvd::rank());
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    torch::mse_loss(l(x), y).backward();
    opt.synchronize();
    torch::nn::utils::clip_grad_norm_(l->parameters(), clip_norm);
    auto skip = opt.skip_synchronize();
    opt.step();
  }
  auto out = flat(l);
  hvd::shutdown();
  return out;
}

// The reference: the ranks' gradients averaged (summed) by hand, clipped,
// stepped.
std::vector<float> clip_single(int ranks, bool sum, double norm) {
  torch::manual_seed(1);
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  auto params = l->parameters();
  for (int s = 0; s < 5; ++s) {
    std::vector<torch::Tensor> total{torch::zeros_like(params[0]), torch::zeros_like(params[1])};
    for (int r = 0; r < ranks; ++r) {
      sgd.zero_grad();
      auto [x, y] = shard_of(r);
      torch::mse_loss(l(x), y).backward();
      for (size_t i = 0; i < params.size(); ++i)
        total[i] += params[i].grad();
    }
    for (size_t i = 0; i < params.size(); ++i)
      params[i].mutable_grad() = sum ? total[i] : total[i] / ranks;
    torch::nn::utils::clip_grad_norm_(params, norm);
    sgd.step();
  }
  return flat(l);
}

// In a worker: every rank's gradient is `value` (3 elements); reduced with
// average, `predivide` and `fp16`; the gradient the optimizer left, -1 for
// a value that is not finite (CAF 0.17 cannot serialize infinity: its
// pack754 loops for ever).
std::vector<float> predivided(float value, double predivide, bool fp16) {
  hvd::init();
  auto p = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD sgd({p}, 1.0);
  hvd::distributed_optimizer opt(
    sgd, {.wire = fp16 ? hvd::compression::fp16 : hvd::compression::none,
          .gradient_predivide_factor = predivide});
  opt.zero_grad();
  (p * (value * static_cast<float>(hvd::rank() + 1))).sum().backward();
  opt.step();
  auto g = p.grad();
  std::vector<float> out(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  for (auto& v : out)
    if (!std::isfinite(v))
      v = -1;
  hvd::shutdown();
  return out;
}

// In a worker: Horovod's test_broadcast_state_no_grad: a parameter without
// grad and one with, SGD (momentum, nesterov, weight decay) without state;
// returns whether a has a gradient, whether b has one, b's gradient's sum,
// the number of state entries, and b after the broadcast.
std::vector<double> state_no_grad() {
  hvd::init();
  torch::manual_seed(hvd::rank() + 11);
  auto a = torch::tensor({1.0f, 3.0f});
  auto b = torch::rand({4}).requires_grad_();
  torch::optim::SGD sgd({a, b}, torch::optim::SGDOptions(0.001).weight_decay(1e-6).momentum(
                                  0.9).nesterov(true));
  hvd::distributed_optimizer opt(sgd);
  hvd::broadcast_parameters({a, b}, 0);
  hvd::broadcast_optimizer_state(opt, 0);
  std::vector<double> out{double(a.grad().defined()), double(b.grad().defined()),
                          b.grad().defined() ? b.grad().sum().item<double>() : -1.0,
                          double(sgd.state().size())};
  auto bb = b.detach();
  out.insert(out.end(), bb.data_ptr<float>(), bb.data_ptr<float>() + bb.numel());
  hvd::shutdown();
  return out;
}

// Horovod's test_horovod_allreduce_error, ported: rank 1's tensor has
// another shape of as many elements (22287) as rank 0's; synchronous, or
// async under a name when `named`. Returns the error ("collective_error:
// ...", "other: ...", "none") and whether the next allreduce worked.
std::vector<std::string> allreduce_shapes_differ(bool named) {
  hvd::init();
  auto t = hvd::rank() == 0 ? torch::ones({17, 1311}) : torch::ones({17, 23, 57});
  std::string text = "none";
  try {
    if (named) {
      auto h = hvd::allreduce_async(t, hvd::op::sum, "shapes");
      hvd::synchronize(h);
    } else {
      hvd::allreduce(t, hvd::op::sum);
    }
  } catch (const hvactor::collective_error& e) {
    text = std::string("collective_error: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("other: ") + e.what();
  }
  auto after = torch::ones({3});
  hvd::allreduce(after, hvd::op::sum);
  bool ok = after[2].item<float>() == float(hvd::size());
  hvd::shutdown();
  return {text, ok ? "then ok" : "then wrong"};
}

// Horovod's test_horovod_allreduce_duplicate_name_error, ported and made
// deterministic: each rank submits a name no other rank has submitted
// yet ("dup.<rank>"), so it surely is still in flight, then the same name
// again, which must throw at the call; after a barrier every rank submits
// the others' names and everything finishes; a name whose operation
// finished is free again. Returns the second call's error and "then ok".
std::vector<std::string> duplicate_name_in_flight() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  auto name = [](int k) { return "dup." + std::to_string(k); };
  std::vector<torch::Tensor> ts{torch::ones({17, 17, 17})};
  std::vector<hvd::tensor_handle> hs;
  hs.push_back(hvd::allreduce_async(ts[0], hvd::op::sum, name(r)));
  std::string text = "no error at the call";
  try {
    auto again = torch::ones({17, 17, 17});
    hvd::allreduce_async(again, hvd::op::sum, name(r));
  } catch (const std::invalid_argument& e) {
    text = std::string("invalid_argument: ") + e.what();
  } catch (const std::exception& e) {
    text = std::string("other: ") + e.what();
  }
  hvd::barrier();
  for (int k = 0; k < n; ++k)
    if (k != r) {
      ts.push_back(torch::ones({17, 17, 17}));
      hs.push_back(hvd::allreduce_async(ts.back(), hvd::op::sum, name(k)));
    }
  for (auto& h : hs)
    hvd::synchronize(h);
  bool ok = true;
  for (auto& t : ts)
    ok = ok && torch::equal(t, torch::full({17, 17, 17}, float(n)));
  for (int round = 0; round < 2; ++round) { // finished: the name is free
    auto t = torch::ones({4});
    auto h = hvd::allreduce_async(t, hvd::op::sum, "dup.again");
    hvd::synchronize(h);
    ok = ok && t[3].item<float>() == float(n);
  }
  hvd::shutdown();
  return {text, ok ? "then ok" : "then wrong"};
}

// The bits of every element of `t` (float32), if they are all the same;
// else "differ".
std::string float_bits(const torch::Tensor& t) {
  auto c = t.contiguous();
  const auto* p = c.data_ptr<float>();
  uint32_t first = 0;
  std::memcpy(&first, p, 4);
  for (int64_t i = 1; i < c.numel(); ++i)
    if (std::memcmp(&first, p + i, 4) != 0)
      return "differ";
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", first);
  return text;
}

// Horovod's test_horovod_allreduce_prescale and _postscale, ported at the
// factor their seed draws and an element of 75: float32 scaled by
// (float)factor, as Horovod's ScaleBufferCPUImpl; the average as part of
// the postscale factor. Returns the bits of a prescaled sum, a postscaled
// sum and a postscaled average.
std::vector<std::string> scale_factor_bits() {
  hvd::init();
  const double factor = 0.1915194503788923; // np.random.seed(1234); np.random.uniform()
  auto pre = torch::full({17, 17}, 75.0f);
  hvd::allreduce(pre, hvd::op::sum, {.prescale_factor = factor});
  auto post = torch::full({17, 17}, 75.0f);
  hvd::allreduce(post, hvd::op::sum, {.postscale_factor = factor});
  auto average = torch::full({17, 17}, 75.0f);
  auto h = hvd::allreduce_async(average, hvd::op::average, "average", {.postscale_factor = factor});
  hvd::synchronize(h);
  hvd::shutdown();
  return {float_bits(pre), float_bits(post), float_bits(average)};
}

hvactor::executor make(int n) {
  return hvactor::executor{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                           {.num_workers = n}};
}

} // namespace

TEST_SUITE("torch") {

TEST_CASE("4 workers training Linear(2,2) with the distributed optimizer end with identical "
          "parameters, equal to single-process training on the whole batch within 1e-5, with "
          "gradients reduced during backward (overlap) and at step()") {
  struct variant {
    int passes;
    bool overlap, setter;
  };
  for (auto [passes, overlap, setter] : {variant{1, true, false}, {2, true, false},
                                          {1, false, false}, {2, false, false}, {3, true, true}}) {
    CAPTURE(passes);
    CAPTURE(overlap);
    CAPTURE(setter);
    auto ex = make(4);
    ex.start();
    auto per_rank = ex.run(&train_linear, 10, passes, overlap, setter);
    ex.shutdown();
    auto reference = train_single(4, 10, passes);
    REQUIRE(per_rank.size() == 4);
    for (size_t r = 0; r < per_rank.size(); ++r) {
      CAPTURE(r);
      REQUIRE(per_rank[r].size() == reference.size());
      CHECK(per_rank[r] == per_rank[0]);
      for (size_t i = 0; i < reference.size(); ++i)
        CHECK(std::abs(per_rank[r][i] - reference[i]) < 1e-5);
    }
    // Training moved the weights (the test would be trivial otherwise).
    torch::manual_seed(1);
    torch::nn::Linear initial(2, 2);
    CHECK(flat(initial) != reference);
  }
}

TEST_CASE("compression::fp16 reduces float32 gradients as float16 and writes them back as "
          "float32, with and without overlap") {
  for (bool overlap : {true, false}) {
    CAPTURE(overlap);
    auto ex = make(2);
    ex.start();
    auto exact = ex.run(&compressed_grad, overlap, false);
    auto half = ex.run(&compressed_grad, overlap, true);
    ex.shutdown();
    for (int r = 0; r < 2; ++r) {
      REQUIRE(exact[r].size() == 3);
      REQUIRE(half[r].size() == 3);
      // (1.0001 + 2.0001) / 2 in float32; in float16 1.0001 and 2.0001 round
      // to 1 and 2 (spacing 2^-10 and 2^-9), so the mean is exactly 1.5.
      CHECK(exact[r][0] == doctest::Approx(1.5001).epsilon(1e-6));
      CHECK(exact[r][0] != 1.5f);
      CHECK(half[r][0] == 1.5f);
      CHECK(half[r] == half[0]);
    }
  }
}

TEST_CASE("overlap: a gradient computed once more than backward_passes_per_step times before "
          "step() is an error from backward(), and zero_grad() before step() is refused") {
  for (int k : {1, 2}) {
    CAPTURE(k);
    auto ex = make(2);
    ex.start();
    auto texts = ex.run(&double_backward, k);
    ex.shutdown();
    for (auto& t : texts) {
      CHECK(t[0].find("the gradient of allreduce.noname.0.") != std::string::npos);
      CHECK(t[0].find("more than backward_passes_per_step times before step() "
                      "(backward_passes_per_step = " + std::to_string(k) + ")") !=
            std::string::npos);
      CHECK(t[1].find("zero_grad() was called after backward() but before step() or "
                      "synchronize()") != std::string::npos);
    }
  }
}

TEST_CASE("allreduce, allgather and broadcast on tensors (non-contiguous, uneven first dims)") {
  auto ex = make(3);
  ex.start();
  auto out = ex.run(&tensor_ops);
  ex.shutdown();
  for (auto& o : out) {
    REQUIRE(o.size() == 5);
    CHECK(o[0] == 36.0);          // 6 elements x (1 + 2 + 3)
    CHECK(o[1] == doctest::Approx(6.0)); // element 5 + mean rank 1
    CHECK(o[2] == 6.0);           // 1 + 2 + 3 rows
    CHECK(o[3] == 16.0);          // 2 x (0 + 2 + 6)
    CHECK(o[4] == 20.0);          // rank 2's value
  }
}

TEST_CASE("broadcast_optimizer_state gives every rank root's momentum buffers") {
  auto ex = make(3);
  ex.start();
  auto sums = ex.run(&optimizer_state);
  ex.shutdown();
  REQUIRE(sums.size() == 3);
  REQUIRE(sums[0].size() == 2);
  CHECK(sums[0][0] != -1.0); // rank 0 has momentum buffers
  CHECK(sums[1] == sums[0]);
  CHECK(sums[2] == sums[0]);
}

TEST_CASE("tensors whose dtype or shape differ between ranks give every rank a collective_error "
          "naming both shapes before any data moves, and the next collective works") {
  const std::vector<std::string> want{
    "hvd::allgather 'rows': rank 1 sent shape [2, 3] but rank 0 has [2, 4]; every dimension but "
    "the first must match",
    "hvd::allgather 'rows': rank 1 sent shape [6] but rank 0 has [2, 3]; every rank must send as "
    "many dimensions",
    "hvd::allgather 'rows': rank 1 sent float64 [2, 3] but rank 0 has float32 [2, 3]; every rank "
    "must send the same dtype",
    "hvd::broadcast 'w': rank 1 has float32 [3] but root rank 0 has float32 [4]; every rank must "
    "pass root's dtype and shape",
    "hvd::broadcast 'w': rank 1 has int64 [4] but root rank 0 has float32 [4]",
    "hvd::broadcast_parameters: rank 1 passed 3 tensors but root rank 0 passed 2",
    "hvd::broadcast_parameters: tensor 1: rank 1 has float32 [3, 5] but root rank 0 has float32 "
    "[3, 2]"};
  auto ex = make(2);
  ex.start();
  for (int mode = 0; mode < static_cast<int>(want.size()); ++mode) {
    CAPTURE(mode);
    auto out = ex.run(&mismatched, mode);
    REQUIRE(out.size() == 2);
    for (auto& rank : out) {
      CHECK(rank[0].rfind("collective_error: ", 0) == 0);
      CHECK(rank[0].find(want[static_cast<size_t>(mode)]) != std::string::npos);
      CHECK(rank[1] == "then ok");
    }
    CHECK(out[0][0] == out[1][0]); // the same verdict on every rank
  }
  ex.shutdown();
}

TEST_CASE("an allreduce of tensors with as many elements but different shapes gives every rank "
          "a collective_error naming both shapes (Horovod's test_horovod_allreduce_error), "
          "synchronous and async, and the next allreduce works") {
  auto ex = make(2);
  ex.start();
  for (bool named : {false, true}) {
    CAPTURE(named);
    auto out = ex.run(&allreduce_shapes_differ, named);
    REQUIRE(out.size() == 2);
    for (auto& rank : out) {
      CAPTURE(rank[0]);
      CHECK(rank[0].rfind("collective_error: ", 0) == 0);
      CHECK(rank[0].find(std::string{"Mismatched allreduce tensor shapes: rank 0 sent a tensor"}
                         + (named ? " 'shapes'" : "")
                         + " of shape [17, 1311], but rank 1 sent a tensor of shape [17, 23, "
                           "57]")
            != std::string::npos);
      CHECK(rank[1] == "then ok");
    }
  }
  ex.shutdown();
}

TEST_CASE("allreduce_async with the name of an operation still in flight on this rank throws "
          "std::invalid_argument at the call (Horovod's "
          "test_horovod_allreduce_duplicate_name_error); a finished name is free again") {
  auto ex = make(2);
  ex.start();
  auto out = ex.run(&duplicate_name_in_flight);
  ex.shutdown();
  REQUIRE(out.size() == 2);
  for (size_t r = 0; r < out.size(); ++r) {
    CAPTURE(out[r][0]);
    CHECK(out[r][0].rfind("invalid_argument: hvd: allreduce 'dup." + std::to_string(r) + "'", 0)
          == 0);
    CHECK(out[r][0].find("with the name of an operation still in flight there") !=
          std::string::npos);
    CHECK(out[r][1] == "then ok");
  }
}

TEST_CASE("float32 scale factors give Horovod's bits: (float)factor in float, the average part "
          "of the postscale factor (Horovod's test_horovod_allreduce_prescale's factor)") {
  auto ex = make(2);
  ex.start();
  auto out = ex.run(&scale_factor_bits);
  ex.shutdown();
  REQUIRE(out.size() == 2);
  for (auto& rank : out) {
    // 2 x (75.0f x (float)0.1915194503788923); through double: 0x41e5d2c6.
    CHECK(rank[0] == "0x41e5d2c7");
    // 150.0f x (float)factor.
    CHECK(rank[1] == "0x41e5d2c7");
    // 150.0f x (float)(factor / 2); divided, then scaled: 0x4165d2c6.
    CHECK(rank[2] == "0x4165d2c7");
  }
}

TEST_CASE("broadcast_optimizer_state gives every rank root's param group options (SGD and Adam, "
          "two groups, options that differed per rank), and a step keeps ranks byte-identical") {
  for (bool adam : {false, true}) {
    CAPTURE(adam);
    auto ex = make(2);
    ex.start();
    auto out = ex.run(&optimizer_options, adam);
    ex.shutdown();
    REQUIRE(out.size() == 2);
    auto want = adam ? std::vector<double>{0.01, 0.8, 0.99, 1e-8, 0.0, 1.0,
                                           0.011, 0.8, 0.9899, 1e-8, 0.003, 1.0}
                     : std::vector<double>{0.1, 0.5, 0.0, 0.0, 1.0, 1.1, 0.51, 0.0, 0.001, 1.0};
    for (auto& rank : out) {
      REQUIRE(rank.size() == want.size() + 12);
      for (size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(rank[i] == doctest::Approx(want[i]).epsilon(1e-12));
      }
    }
    // Options and parameters after one step: identical, bit for bit.
    CHECK(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(double)) == 0);
  }
}

TEST_CASE("broadcast_optimizer_state carries the options of every LibTorch optimizer") {
  auto ex = make(2);
  ex.start();
  auto out = ex.run(&every_optimizer_lr);
  ex.shutdown();
  // SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS: root rank 1's lr; LBFGS's
  // history_size.
  for (auto& rank : out)
    CHECK(rank == std::vector<double>{0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 11.0});
}

TEST_CASE("broadcast_optimizer_state refuses, on every rank, options it cannot send and "
          "optimizers that differ between ranks") {
  const std::vector<std::string> want{
    "the options of param group 0 (", // then the demangled plain_options
    "param group 0 has torch::optim::SGDOptions on root rank 0 but torch::optim::AdamOptions on "
    "rank 1",
    "root rank 0 has 2 param groups but rank 1 has 1"};
  auto ex = make(2);
  ex.start();
  for (int mode = 0; mode < 3; ++mode) {
    CAPTURE(mode);
    auto out = ex.run(&optimizer_refused, mode);
    REQUIRE(out.size() == 2);
    for (auto& text : out) {
      CHECK(text.rfind("collective_error: hvd::broadcast_optimizer_state: ", 0) == 0);
      CHECK(text.find(want[static_cast<size_t>(mode)]) != std::string::npos);
      if (mode == 0)
        CHECK(text.find("plain_options) on rank 0 cannot be serialized") != std::string::npos);
    }
    CHECK(out[0] == out[1]);
  }
  ex.shutdown();
}

TEST_CASE("torch_state::restore() puts back the param groups' options of the last save, and "
          "drops state the optimizer gained since") {
  torch::nn::Linear l(2, 2);
  torch::optim::Adam adam(l->parameters(), torch::optim::AdamOptions(0.01).betas({0.8, 0.9}));
  hvd::elastic::torch_state st{l, adam};
  auto& o = static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options());
  o.lr(0.5).betas({0.1, 0.2}).weight_decay(0.3);
  l(torch::ones({1, 2})).sum().backward();
  adam.step();
  REQUIRE(!adam.state().empty());
  st.restore();
  CHECK(o.lr() == 0.01);
  CHECK(std::get<0>(o.betas()) == 0.8);
  CHECK(std::get<1>(o.betas()) == 0.9);
  CHECK(o.weight_decay() == 0.0);
  CHECK(adam.state().empty());
}

TEST_CASE("bad options give clear errors") {
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  CHECK_THROWS_WITH_AS(hvd::distributed_optimizer(sgd, 0),
                       doctest::Contains("backward_passes_per_step must be >= 1: Got 0."),
                       std::invalid_argument);
  auto bools = torch::zeros({2}, torch::kBool);
  CHECK_THROWS_WITH_AS(hvd::allreduce(bools), doctest::Contains("op::average is not defined"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hvd::alltoall(torch::tensor(1.0)), doctest::Contains("0-dimensional"),
                       std::invalid_argument);
  auto complex = torch::zeros({2}, torch::kComplexFloat);
  CHECK_THROWS_WITH_AS(hvd::allreduce(complex, hvd::op::sum),
                       doctest::Contains("tensors of ComplexFloat are not supported"),
                       std::invalid_argument);
}

TEST_CASE("distributed_optimizer names each allreduce after its parameter: Horovod's default "
          "names, or named_parameters(); bad options are refused") {
  torch::nn::Linear l(2, 2), other(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  CHECK(hvd::distributed_optimizer(sgd).names() ==
        std::vector<std::string>{"allreduce.noname.0.0", "allreduce.noname.0.1"});
  CHECK(hvd::distributed_optimizer(sgd, l->named_parameters()).names() ==
        std::vector<std::string>{"weight", "bias"});
  CHECK_THROWS_WITH_AS(hvd::distributed_optimizer(sgd, other->named_parameters()),
                       doctest::Contains("named_parameters was given, but parameter 0 of param "
                                         "group 0 (shape [2, 2]) is not among them"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
    hvd::distributed_optimizer(sgd, {.reduction = hvd::op::sum, .gradient_predivide_factor = 2}),
    doctest::Contains("gradient_predivide_factor 2 needs op::average"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hvd::distributed_optimizer(sgd, {.gradient_predivide_factor = 0}),
                       doctest::Contains("gradient_predivide_factor must be a finite number > 0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
    hvd::distributed_optimizer(sgd, {.groups = {{l->weight}}, .num_groups = 2}),
    doctest::Contains("pass groups or num_groups, not both"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hvd::distributed_optimizer(sgd, {.groups = {{l->weight}, {l->weight}}}),
                       doctest::Contains("a parameter can only appear once in groups"),
                       std::invalid_argument);
  hvd::distributed_optimizer opt(sgd);
  CHECK_THROWS_WITH_AS(opt.set_backward_passes_per_step(0),
                       doctest::Contains("backward_passes_per_step must be >= 1: Got 0."),
                       std::invalid_argument);
  opt.set_backward_passes_per_step(4);
  CHECK(opt.backward_passes_per_step() == 4);
}

TEST_CASE("grad_schedule: k backward passes make a gradient ready, a group starts when all its "
          "members are ready, synchronize() starts the rest in unit order") {
  using hvd::detail::grad_schedule;
  using units = std::vector<std::vector<size_t>>;
  CHECK(grad_schedule::split({0, 1, 2, 3, 4}, 2) == units{{0, 1, 2}, {3, 4}});
  CHECK(grad_schedule::split({0, 1, 2, 3, 4}, 3) == units{{0, 1}, {2, 3}, {4}});
  CHECK(grad_schedule::split({7, 8}, 4) == units{{7}, {8}});
  CHECK(grad_schedule::with_groups({0, 1, 2, 3}, {{3, 9, 1}}) == units{{3, 1}, {0}, {2}});
  CHECK_THROWS_AS(grad_schedule::with_groups({0, 1}, {{0}, {1, 0}}), std::invalid_argument);

  grad_schedule alone{3, {{0}, {1}, {2}}, 2};
  CHECK(alone.idle());
  CHECK(alone.on_gradient(1).empty()); // 1 of 2 passes
  CHECK(!alone.idle());
  CHECK(!alone.exhausted(1));
  CHECK(alone.on_gradient(1) == std::vector<size_t>{1});
  CHECK(alone.exhausted(1));
  CHECK(alone.on_gradient(0).empty());
  CHECK(alone.flush() == std::vector<size_t>{0, 2}); // 0 counted once, 2 never
  CHECK(alone.idle());
  CHECK(!alone.exhausted(1));

  grad_schedule grouped{4, {{2, 0}, {1}, {3}}, 1};
  CHECK(grouped.on_gradient(0).empty());
  CHECK(grouped.on_gradient(3) == std::vector<size_t>{3});
  CHECK(grouped.on_gradient(2) == std::vector<size_t>{2, 0});
  CHECK(grouped.flush() == std::vector<size_t>{1});
  CHECK(grouped.on_gradient(2).empty());
  CHECK(grouped.flush() == std::vector<size_t>{2, 0, 1, 3});
  grouped.set_passes(3);
  CHECK(grouped.on_gradient(3).empty());
  CHECK(grouped.on_gradient(3).empty());
  CHECK(grouped.on_gradient(3) == std::vector<size_t>{3});
  CHECK_THROWS_AS(grouped.set_passes(0), std::invalid_argument);
}

TEST_CASE("a model with a data-dependent branch (heads unused on some ranks in some steps) "
          "trains on 2 and 3 ranks to the parameters of one process fed the averaged "
          "gradients, unused gradients reduced as zeros, with and without overlap and groups") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    auto reference = branchy_single(n);
    auto ex = make(n);
    ex.start();
    // Overlap without one all-parameter group submits in each rank's
    // autograd order: exact only where the engine pairs operations by name.
    bool by_name = ex.run(&names_pair)[0];
    MESSAGE("operations pair by name: " << by_name);
    for (int mode = 0; mode <= (by_name ? 4 : 2); ++mode) {
      CAPTURE(mode);
      auto per_rank = ex.run(&branchy_train, mode);
      REQUIRE(per_rank.size() == static_cast<size_t>(n));
      for (auto& rank : per_rank) {
        REQUIRE(rank.size() == reference.size());
        CHECK(rank == per_rank[0]);
        for (size_t i = 0; i < reference.size(); ++i)
          CHECK(std::abs(rank[i] - reference[i]) < 1e-5);
      }
    }
    ex.shutdown();
  }
}

TEST_CASE("ranks with uneven data join: the distributed optimizer averages the others' "
          "gradients with the joined ranks' zeros, and after join() every rank holds the "
          "parameters of one process fed those averages") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    auto reference = branchy_join_single(n);
    auto ex = make(n);
    ex.start();
    for (bool overlap : {false, true}) {
      CAPTURE(overlap);
      auto per_rank = ex.run(&branchy_join, overlap);
      REQUIRE(per_rank.size() == static_cast<size_t>(n));
      for (auto& rank : per_rank) {
        REQUIRE(rank.size() == reference.size() + 1);
        CHECK(rank.back() == static_cast<float>(n - 1)); // the last to join
        CHECK(rank == per_rank[0]);
        for (size_t i = 0; i < reference.size(); ++i)
          CHECK(std::abs(rank[i] - reference[i]) < 1e-5);
      }
    }
    ex.shutdown();
  }
}

TEST_CASE("clipping between synchronize() and step() inside skip_synchronize() gives the "
          "parameters of clipping the averaged (summed) gradients by hand") {
  auto ex = make(2);
  ex.start();
  for (bool sum : {false, true}) {
    CAPTURE(sum);
    auto per_rank = ex.run(&clip_between, sum);
    auto reference = clip_single(2, sum, clip_norm);
    CHECK(reference != clip_single(2, sum, 1e9)); // the clipping changed something
    for (auto& rank : per_rank) {
      REQUIRE(rank.size() == reference.size());
      for (size_t i = 0; i < reference.size(); ++i)
        CHECK(std::abs(rank[i] - reference[i]) < 1e-6);
    }
  }
  ex.shutdown();
}

TEST_CASE("gradient_predivide_factor: the average is unchanged, and float16 sums that would "
          "overflow 65504 do not") {
  auto ex = make(2);
  ex.start();
  // Gradients 1 and 2: average 1.5 with any factor.
  for (double f : {1.0, 2.0, 8.0}) {
    CAPTURE(f);
    for (auto& rank : ex.run(&predivided, 1.0f, f, false))
      CHECK(rank == std::vector<float>(3, 1.5f));
  }
  // Gradients 32000 and 64000 in float16: their sum overflows without a
  // predivide factor; with 2 the wire carries 16000 + 32000 and the result
  // is 48000 exactly.
  for (auto& rank : ex.run(&predivided, 32000.0f, 1.0, true))
    CHECK(rank[0] == -1.0f); // not finite
  for (auto& rank : ex.run(&predivided, 32000.0f, 2.0, true))
    CHECK(rank == std::vector<float>(3, 48000.0f));
  ex.shutdown();
}

TEST_CASE("broadcast_optimizer_state on an optimizer without state creates it as Horovod does "
          "(zero gradients for the parameters that require grad, one step)") {
  auto ex = make(2);
  ex.start();
  auto out = ex.run(&state_no_grad);
  ex.shutdown();
  for (auto& rank : out) {
    REQUIRE(rank.size() == 8);
    CHECK(rank[0] == 0.0); // a: no gradient
    CHECK(rank[1] == 1.0); // b: a zero gradient
    CHECK(rank[2] == 0.0);
    CHECK(rank[3] == 1.0); // b's momentum buffer
  }
  CHECK(out[0] == out[1]);
}

namespace {

// In a worker: the small and 16-bit types, and bool. Returns one line per
// check ("ok ..." or what went wrong).
std::vector<std::string> small_types() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto u8 = torch::full({5}, r + 100, torch::kByte); // wraps past 255 on purpose
  hvd::allreduce(u8, hvd::op::sum);
  expect(u8[0].item<int64_t>() == (100 * n + n * (n - 1) / 2) % 256, "uint8 sum wraps");
  auto i8 = torch::full({3}, -r - 1, torch::kChar);
  hvd::allreduce(i8, hvd::op::min);
  expect(i8[2].item<int64_t>() == -n, "int8 min");
  auto i16 = torch::full({2, 2}, 1000 * (r + 1), torch::kShort);
  hvd::allreduce(i16, hvd::op::average);
  expect(i16[1][1].item<int64_t>() == 1000 * (n + 1) / 2, "int16 average");
  auto bf = torch::full({4}, 0.5 * (r + 1), torch::kBFloat16);
  hvd::allreduce(bf, hvd::op::sum);
  expect(bf[3].item<float>() == 0.5f * n * (n + 1) / 2, "bfloat16 sum");
  auto any = torch::full({3}, r == 1, torch::kBool), all = torch::full({3}, r != 1, torch::kBool);
  hvd::allreduce(any, hvd::op::max);
  hvd::allreduce(all, hvd::op::min);
  expect(any.all().item<bool>() && !all.any().item<bool>(), "bool or / and");
  auto g = hvd::allgather(torch::full({r + 1}, r % 2 == 0, torch::kBool));
  expect(g.scalar_type() == torch::kBool && g.size(0) == n * (n + 1) / 2 && !g[1].item<bool>(),
         "bool allgather");
  auto b = torch::full({3}, 7 * r, torch::kShort);
  hvd::broadcast(b, n - 1);
  expect(b[0].item<int64_t>() == 7 * (n - 1), "int16 broadcast");
  hvd::shutdown();
  return out;
}

// In a worker: tensor allreduce_async (a non-contiguous one too),
// grouped_allreduce, and alltoall with equal and uneven splits.
/// Rank r's tensor for the reducescatter checks: row i, column j holds
/// (r + 1) * (3 i + j) (exact in every dtype used).
torch::Tensor scatter_input(int r, int64_t rows, int64_t cols, torch::Dtype t) {
  return torch::arange(rows * cols, torch::kDouble).reshape({rows, cols}).mul(r + 1).to(t);
}

/// Issue 31 on tensors: reducescatter (uneven rows, sum and average, scale
/// factors, int64, grouped), allreduce and allreduce_async with scale
/// factors, a shape that differs on one rank (a collective_error on every
/// rank), a 0-dimensional tensor (refused locally).
std::vector<std::string> reducescatter_and_scales() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  // Rows of the result: 7 rows over n ranks, the first 7 % n get one more.
  auto rows_of = [&](int64_t rows, int k) { return rows / n + (k < rows % n ? 1 : 0); };
  auto offset_of = [&](int64_t rows, int k) {
    int64_t at = 0;
    for (int i = 0; i < k; ++i)
      at += rows_of(rows, i);
    return at;
  };
  auto reference = [&](int64_t rows, int64_t cols, torch::Dtype t) {
    auto sum = torch::zeros({rows, cols}, torch::kDouble);
    for (int k = 0; k < n; ++k)
      sum += scatter_input(k, rows, cols, torch::kDouble);
    return sum.narrow(0, offset_of(rows, r), rows_of(rows, r)).to(t);
  };
  auto x = scatter_input(r, 7, 3, torch::kFloat);
  auto y = hvd::reducescatter(x, hvd::op::sum);
  expect(y.sizes() == reference(7, 3, torch::kFloat).sizes() &&
           torch::equal(y, reference(7, 3, torch::kFloat)),
         "reducescatter sum, uneven rows");
  auto z = hvd::reducescatter(x, hvd::op::average, {.prescale_factor = 0.5, .postscale_factor = 4});
  expect(torch::allclose(z, reference(7, 3, torch::kFloat).mul(2.0 / n)),
         "reducescatter average with scale factors");
  auto xi = scatter_input(r, 5, 2, torch::kLong);
  expect(torch::equal(hvd::reducescatter(xi, hvd::op::sum), reference(5, 2, torch::kLong)),
         "reducescatter int64");
  std::vector<torch::Tensor> group{scatter_input(r, 4, 1, torch::kDouble),
                                   scatter_input(r, 9, 2, torch::kFloat)};
  auto parts = hvd::grouped_reducescatter(group, hvd::op::sum);
  expect(parts.size() == 2 && torch::equal(parts[0], reference(4, 1, torch::kDouble)) &&
           torch::equal(parts[1], reference(9, 2, torch::kFloat)),
         "grouped_reducescatter");
  auto a = torch::full({1000}, float(r + 1));
  hvd::allreduce(a, hvd::op::sum, {.prescale_factor = 2, .postscale_factor = 0.5});
  auto ai = torch::full({10}, int64_t{r + 1}, torch::kLong);
  auto h = hvd::allreduce_async(ai, hvd::op::average, "ai", {.postscale_factor = 3});
  hvd::synchronize(h);
  expect(a[999].item<float>() == float(n * (n + 1) / 2) &&
           ai[9].item<int64_t>() == (n * (n + 1) / 2) / n * 3,
         "allreduce and allreduce_async with scale factors");
  // compression::fp16 on direct calls: float32 travels as float16 and
  // comes back as float32 (1000.25 is not a float16: the sum shows it).
  auto c = torch::full({8}, 1000.25f * float(r + 1));
  auto half_ref = c.to(torch::kHalf);
  hvd::allreduce(half_ref, hvd::op::sum);
  hvd::allreduce(c, hvd::op::sum, {}, hvd::compression::fp16);
  auto cr = hvd::reducescatter(torch::full({2 * n, 2}, 1000.25f * float(r + 1)), hvd::op::sum, {},
                               "", hvd::compression::fp16);
  expect(c.scalar_type() == torch::kFloat && torch::equal(c, half_ref.to(torch::kFloat)) &&
           c[0].item<float>() != 1000.25f * float(n * (n + 1) / 2) &&
           cr.scalar_type() == torch::kFloat && cr[0][0].item<float>() == c[0].item<float>(),
         "compression::fp16 on allreduce and reducescatter");
  try {
    hvd::reducescatter(torch::zeros({4, r == 1 ? 3 : 2}), hvd::op::sum);
    expect(false, "a shape that differs on rank 1: no error");
  } catch (const hvactor::collective_error& e) {
    expect(std::string{e.what()}.find("every rank must pass the same dtype and shape")
             != std::string::npos,
           std::string{"a shape that differs on rank 1: "} + e.what());
  }
  try {
    hvd::reducescatter(torch::tensor(1.0f), hvd::op::sum);
    expect(false, "0-dimensional: no error");
  } catch (const std::invalid_argument& e) {
    expect(std::string{e.what()}.find("0-dimensional") != std::string::npos, "0-dimensional");
  }
  hvd::shutdown();
  return out;
}

std::vector<std::string> async_and_alltoall() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto a = torch::full({100}, float(r + 1));
  auto b = torch::arange(6, torch::kDouble).reshape({2, 3}).t().add(r); // non-contiguous
  auto ha = hvd::allreduce_async(a, hvd::op::sum, "a");
  auto hb = hvd::allreduce_async(b, hvd::op::average, "b");
  hvd::synchronize(hb);
  hvd::synchronize(ha);
  expect(a[99].item<float>() == float(n * (n + 1) / 2), "async sum");
  expect(b[2][1].item<double>() == 5 + (n - 1) / 2.0, "async average, non-contiguous");
  std::vector<torch::Tensor> group{torch::full({3}, int64_t{r}, torch::kLong),
                                   torch::full({2, 2}, float(r), torch::kFloat)};
  hvd::grouped_allreduce(group, hvd::op::max);
  expect(group[0][2].item<int64_t>() == n - 1 && group[1][1][1].item<float>() == float(n - 1),
         "grouped max");
  // Equal parts: rank r sends row block i (value 10 r + i) to rank i.
  auto x = torch::empty({2 * n, 3});
  for (int i = 0; i < n; ++i)
    x.narrow(0, 2 * i, 2).fill_(10 * r + i);
  auto y = hvd::alltoall(x);
  bool equal_ok = y.size(0) == 2 * n && y.size(1) == 3;
  for (int i = 0; i < n && equal_ok; ++i)
    equal_ok = y[2 * i][0].item<float>() == float(10 * i + r);
  expect(equal_ok, "alltoall equal parts");
  // Uneven: rank r sends i + 1 rows to rank i.
  std::vector<int64_t> splits;
  for (int i = 0; i < n; ++i)
    splits.push_back(i + 1);
  auto u = torch::full({n * (n + 1) / 2, 2}, int64_t{r}, torch::kLong);
  std::vector<int64_t> got;
  auto v = hvd::alltoall(u, splits, &got);
  expect(v.size(0) == n * (r + 1) && got == std::vector<int64_t>(n, r + 1)
           && v[v.size(0) - 1][1].item<int64_t>() == n - 1,
         "alltoall uneven splits");
  hvd::shutdown();
  return out;
}

// In a worker: a torch_state with named values of several types, changed
// and restored, then rank 0's synced everywhere.
std::vector<std::string> named_values() {
  hvd::init();
  int r = hvd::rank();
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  hvd::elastic::torch_state st{l, sgd, {{"epoch", 3}},
                               {{"best", torch::IValue(0.25)},
                                {"tag", torch::IValue(std::string{"start"})},
                                {"ema", torch::IValue(torch::full({2}, 1.0))}}};
  st.value("best") = torch::IValue(9.0 + r);
  st.value("ema").toTensor().fill_(5.0 + r);
  st.restore();
  std::vector<std::string> out;
  out.push_back(std::to_string(st.value("best").toDouble()));
  out.push_back(std::to_string(st.value("ema").toTensor()[0].item<double>()));
  st.value("tag") = torch::IValue("rank " + std::to_string(r));
  st.value("steps") = torch::IValue(c10::List<int64_t>({r, r + 1}));
  st.sync();
  out.push_back(st.value("tag").toStringRef());
  out.push_back(std::to_string(st.value("steps").toIntList().get(1)));
  out.push_back(std::to_string(st["epoch"]));
  hvd::shutdown();
  return out;
}

// In a worker: an elastic_sampler tracked by a torch_state. Each rank
// records a different amount; restore() puts back the committed state,
// sync() gives every rank rank 0's and repartitions the rest of the epoch;
// a reset callback repartitions for the world it finds. Returns "ok ..."
// / "FAIL ..." lines and this rank's indices after sync.
std::vector<std::string> tracked_sampler() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  hvd::elastic::elastic_sampler sampler{60, true, 5};
  hvd::elastic::torch_state st{l, sgd};
  st.track(sampler);
  expect(sampler.size() == static_cast<size_t>((60 + n - 1) / n), "sized for the world at start");
  sampler.record_batch(0, 4); // 4 x n processed
  st.save();
  sampler.record_batch(1, 4 + static_cast<size_t>(r)); // different on every rank
  st.restore();
  expect(sampler.processed_num() == 4 * n, "restore() puts back the committed count");
  sampler.record_batch(2, 2 + static_cast<size_t>(r));
  st.sync();
  expect(sampler.processed_num() == 4 * n + 2 * n, "sync() gives every rank rank 0's count");
  // The rest of the epoch over the world: what rank 0's count leaves.
  hvd::elastic::elastic_sampler ref{60, true, 5};
  ref.load_state({0, 6 * n});
  ref.reset(r, n);
  expect(sampler.indices() == ref.indices(), "the indices left, repartitioned");
  st.on_reset();
  expect(sampler.indices() == ref.indices(), "a reset keeps the partition of the same world");
  std::string idx = "indices";
  for (auto i : sampler.indices())
    idx += " " + std::to_string(i);
  out.push_back(idx);
  hvd::shutdown();
  return out;
}

/// Rank r's batch for the SyncBatchNorm check: r + 2 samples of 3
/// channels x 5, every rank's computable anywhere (the reference).
torch::Tensor bn_batch(int r) {
  auto g = torch::make_generator<torch::CPUGeneratorImpl>(100 + r);
  return torch::randn({r + 2, 3, 5}, g) * (1.0 + r) + r;
}

/// A fixed weighting of the outputs (the loss is sum(y * weights)).
torch::Tensor bn_loss_weights(int64_t rows) {
  return torch::arange(rows * 15, torch::kFloat).reshape({rows, 3, 5}).sin();
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

/// In a worker: SyncBatchNorm on this rank's batch against one process's
/// BatchNorm1d over every rank's batches: outputs, input gradients,
/// the sum of the ranks' weight and bias gradients, running statistics
/// (after 2 steps), eval mode; and the differentiable collectives'
/// gradients. "ok"/"FAIL" lines.
std::vector<std::string> sync_batch_norm_vs_one_process() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  std::vector<torch::Tensor> batches;
  int64_t offset = 0;
  for (int k = 0; k < n; ++k) {
    batches.push_back(bn_batch(k));
    if (k < r)
      offset += batches.back().size(0);
  }
  auto all = torch::cat(batches);
  torch::nn::BatchNorm1d ref(torch::nn::BatchNorm1dOptions(3).momentum(0.3));
  hvd::SyncBatchNorm bn(torch::nn::BatchNormOptions(3).momentum(0.3));
  for (int step = 0; step < 2; ++step) {
    auto x_ref = all.clone().requires_grad_(true);
    auto y_ref = ref->forward(x_ref);
    (y_ref * bn_loss_weights(all.size(0))).sum().backward();
    auto x = batches[static_cast<size_t>(r)].clone().requires_grad_(true);
    bn->zero_grad();
    auto y = bn->forward(x);
    (y * bn_loss_weights(all.size(0)).narrow(0, offset, x.size(0))).sum().backward();
    auto rows = x.size(0);
    auto s = std::to_string(step);
    expect(max_diff(y, y_ref.narrow(0, offset, rows)) < 1e-5, "forward equals one process's, step " + s);
    expect(max_diff(x.grad(), x_ref.grad().narrow(0, offset, rows)) < 1e-5,
           "input gradient equals one process's, step " + s);
    auto gw = bn->weight.grad().clone(), gb = bn->bias.grad().clone();
    hvd::allreduce(gw, hvd::op::sum);
    hvd::allreduce(gb, hvd::op::sum);
    expect(max_diff(gw, ref->weight.grad()) < 1e-4 && max_diff(gb, ref->bias.grad()) < 1e-4,
           "weight and bias gradients sum to one process's, step " + s);
    ref->zero_grad();
  }
  expect(max_diff(bn->running_mean, ref->running_mean) < 1e-5 &&
           max_diff(bn->running_var, ref->running_var) < 1e-5,
         "running statistics equal one process's");
  bn->eval();
  ref->eval();
  auto mine = batches[static_cast<size_t>(r)];
  expect(max_diff(bn->forward(mine), ref->forward(mine)) < 1e-5, "eval mode uses the running statistics");
  // The differentiable collectives.
  auto a = torch::full({4}, float(r + 1)).requires_grad_(true);
  auto ya = hvd::autograd::allreduce(a, hvd::op::sum);
  (ya * float(r + 1)).sum().backward();
  // d/da_r of sum_k (k+1) * sum_j a_j = sum_k (k+1): the allreduce of the grads.
  expect(ya[0].item<float>() == float(n * (n + 1) / 2) &&
           a.grad()[0].item<float>() == float(n * (n + 1) / 2),
         "autograd::allreduce: the sum forward and back");
  auto g = torch::full({r + 1, 2}, float(r)).requires_grad_(true);
  auto yg = hvd::autograd::allgather(g);
  (yg * yg).sum().backward();
  // Each rank's loss is sum(all^2): d/dg_r = average over ranks of 2 g_r = 2 g_r.
  expect(yg.size(0) == n * (n + 1) / 2 && max_diff(g.grad(), 2 * g.detach()) < 1e-6,
         "autograd::allgather: this rank's rows of the averaged gradient");
  auto b = torch::full({3}, float(r + 5)).requires_grad_(true);
  auto yb = hvd::autograd::broadcast(b, n - 1);
  yb.sum().backward();
  expect(yb[0].item<float>() == float(n + 4) &&
           b.grad()[0].item<float>() == (r == n - 1 ? 1.0f : 0.0f),
         "autograd::broadcast: the root gets the averaged gradient, the others zeros");
  try {
    bn->train();
    bn->forward(torch::ones({4}));
    expect(false, "1-dimensional input: no error");
  } catch (const std::invalid_argument& e) {
    expect(std::string{e.what()}.find("expected at least 2D input") != std::string::npos, "1-D input refused");
  }
  hvd::shutdown();
  return out;
}

// In a worker: the tensor async calls with a new tensor as result, named
// and submitted in an order of each rank's own, against the synchronous
// calls; a shape that differs on rank 1 fails synchronize() on every rank.
std::vector<std::string> tensor_async_results() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto g = torch::full({r + 1, 2}, float(r));
  auto b = torch::full({4}, double(r * 10));
  auto a2a = torch::arange(2 * n * 3, torch::kLong).reshape({2 * n, 3}).add(100 * r);
  auto rs = torch::arange(7 * 2, torch::kFloat).reshape({7, 2}).mul(r + 1);
  hvd::tensor_result_handle hg, hb, ha, hr;
  std::vector<int> order{0, 1, 2, 3};
  std::rotate(order.begin(), order.begin() + r % 4, order.end());
  for (int k : order) {
    if (k == 0)
      hg = hvd::allgather_async(g, "g");
    if (k == 1)
      hb = hvd::broadcast_async(b, n - 1, "b");
    if (k == 2)
      ha = hvd::alltoall_async(a2a, {}, "a2a");
    if (k == 3)
      hr = hvd::reducescatter_async(rs, hvd::op::sum, "rs");
  }
  std::vector<int64_t> splits;
  auto yg = hvd::synchronize(hg);
  auto yb = hvd::synchronize(hb);
  auto ya = hvd::synchronize(ha, &splits);
  auto yr = hvd::synchronize(hr);
  expect(torch::equal(yg, hvd::allgather(g)), "allgather_async equals allgather");
  expect(yb[3].item<double>() == 10.0 * (n - 1) && b[3].item<double>() == r * 10.0,
         "broadcast_async gives root's tensor and leaves the input alone");
  std::vector<int64_t> sync_splits;
  expect(torch::equal(ya, hvd::alltoall(a2a, {}, &sync_splits)) && splits == sync_splits,
         "alltoall_async equals alltoall, splits included");
  expect(torch::equal(yr, hvd::reducescatter(rs, hvd::op::sum)), "reducescatter_async equals reducescatter");
  auto bad = hvd::allgather_async(torch::zeros({2, r == 1 ? 3 : 2}), "bad");
  try {
    hvd::synchronize(bad);
    expect(false, "a shape that differs on rank 1: no error");
  } catch (const hvactor::collective_error& e) {
    expect(std::string{e.what()}.find("every dimension but the first must match") != std::string::npos,
           std::string{"shape mismatch: "} + e.what());
  }
  // A handle dropped without synchronize: what it reads is its own.
  { auto dropped = hvd::allgather_async(torch::ones({3}), "dropped"); }
  hvd::barrier();
  hvd::shutdown();
  return out;
}

/// Tensor collectives on a process set of the last two ranks (a
/// process_set_scope around the adapter's calls, as Horovod's
/// process_set= argument): exact results on members; a rank outside
/// gets the error naming the set. 4 lines on every rank.
std::vector<std::string> tensors_on_process_set() {
  int n = std::atoi(std::getenv("HOROVOD_SIZE"));
  hvd::process_set pair({n - 2, n - 1});
  hvd::init({&pair});
  int r = hvd::rank();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  if (!pair.included()) {
    std::string error;
    try {
      hvd::process_set_scope on{pair};
      auto t = torch::ones({2});
      hvd::allreduce(t, hvd::op::sum);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    expect(error.find("not a member of process set 1") != std::string::npos, "refused: " + error);
    for (int i = 0; i < 3; ++i)
      expect(true, "not a member");
    hvd::shutdown();
    return out;
  }
  hvactor::hvd::tensor_result_handle pending;
  {
    hvd::process_set_scope on{pair};
    auto sum = torch::full({3, 2}, static_cast<double>(r));
    hvd::allreduce(sum, hvd::op::sum);
    expect(torch::equal(sum, torch::full({3, 2}, static_cast<double>(2 * n - 3))), "allreduce");
    auto all = hvd::allgather(torch::full({r + 1, 2}, static_cast<int64_t>(r)));
    expect(all.size(0) == 2 * n - 1 && all[0][0].item<int64_t>() == n - 2 &&
             all[all.size(0) - 1][1].item<int64_t>() == n - 1,
           "allgather in the set's order");
    auto b = torch::full({4}, static_cast<float>(r));
    hvd::broadcast(b, n - 1);
    expect(torch::equal(b, torch::full({4}, static_cast<float>(n - 1))), "broadcast from a global root");
    pending = hvd::reducescatter_async(torch::arange(10, torch::kLong).reshape({5, 2}) + r,
                                       hvd::op::sum, "rs");
  }
  // Synchronized outside the scope: a handle knows its set.
  auto part = hvd::synchronize(pending);
  int me = pair.rank();
  auto want = (torch::arange(10, torch::kLong).reshape({5, 2}) * 2 + (2 * n - 3))
                .narrow(0, me == 0 ? 0 : 3, me == 0 ? 3 : 2);
  expect(torch::equal(part, want), "reducescatter_async over the set's 2 ranks");
  hvd::shutdown();
  return out;
}

/// Runs `fn` on jobs of 2 and 3 workers: every rank returns `lines` lines,
/// each "ok ...".
void each_line_ok(std::vector<std::string> (*fn)(), size_t lines_per_rank) {
  for (int n : {2, 3}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = n}};
    ex.start();
    for (auto& lines : ex.run(fn)) {
      REQUIRE(lines.size() == lines_per_rank);
      for (auto& line : lines) {
        INFO(line);
        CHECK(line.rfind("ok ", 0) == 0);
      }
    }
    ex.shutdown();
  }
}

} // namespace

TEST_CASE("tensor allgather_async, broadcast_async, alltoall_async and reducescatter_async, "
          "submitted in different orders, equal the synchronous calls; a shape mismatch fails "
          "synchronize on every rank") {
  each_line_ok(&tensor_async_results, 5);
}

TEST_CASE("tensor collectives on a process set (the last 2 of 2 and 3 ranks) give exact results "
          "and refuse a rank outside the set") {
  each_line_ok(&tensors_on_process_set, 4);
}

TEST_CASE("SyncBatchNorm on 2 and 3 ranks with batches of different sizes equals one process's "
          "BatchNorm over their union, forward and backward; the differentiable allreduce, "
          "allgather and broadcast give Horovod's gradients") {
  each_line_ok(&sync_batch_norm_vs_one_process, 12);
}

TEST_CASE("an elastic_sampler tracked by a torch_state: restore, sync from rank 0 and reset give "
          "every rank its share of the indices the epoch has not processed") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 3}};
  ex.start();
  std::set<std::string> left;
  for (auto& lines : ex.run(&tracked_sampler)) {
    REQUIRE(lines.size() == 6);
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      INFO(lines[i]);
      CHECK(lines[i].rfind("ok ", 0) == 0);
    }
    std::istringstream words{lines.back().substr(8)};
    for (std::string w; words >> w;)
      left.insert(w);
  }
  CHECK(left.size() == 60 - 18); // 6 x 3 processed, the other 42 shared out
  ex.shutdown();
}

TEST_CASE("uint8, int8, int16, bfloat16 and bool tensors: allreduce with their ops, allgather, "
          "broadcast") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 3}};
  ex.start();
  for (auto& lines : ex.run(&small_types)) {
    REQUIRE(lines.size() == 7);
    for (auto& line : lines) {
      INFO(line);
      CHECK(line.rfind("ok ", 0) == 0);
    }
  }
  ex.shutdown();
}

TEST_CASE("tensor allreduce_async, grouped_allreduce and alltoall (equal and uneven splits)") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 3}};
  ex.start();
  for (auto& lines : ex.run(&async_and_alltoall)) {
    REQUIRE(lines.size() == 5);
    for (auto& line : lines) {
      INFO(line);
      CHECK(line.rfind("ok ", 0) == 0);
    }
  }
  ex.shutdown();
}

TEST_CASE("tensor reducescatter (uneven rows, scale factors, grouped), allreduce with scale "
          "factors, and shape mismatches on 3 and 4 ranks") {
  for (int n : {3, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = n}};
    ex.start();
    for (auto& lines : ex.run(&reducescatter_and_scales)) {
      REQUIRE(lines.size() == 8);
      for (auto& line : lines) {
        INFO(line);
        CHECK(line.rfind("ok ", 0) == 0);
      }
    }
    ex.shutdown();
  }
}

TEST_CASE("torch_state keeps named values of any type: restore() puts them back, sync() gives "
          "every rank rank 0's") {
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                       {.num_workers = 2}};
  ex.start();
  for (auto& out : ex.run(&named_values)) {
    REQUIRE(out.size() == 5);
    CHECK(std::stod(out[0]) == 0.25);
    CHECK(std::stod(out[1]) == 1.0);
    CHECK(out[2] == "rank 0");
    CHECK(out[3] == "1");
    CHECK(out[4] == "3");
  }
  ex.shutdown();
}

} // TEST_SUITE

// -- hvactor::train with tensors ------------------------------------------------------

namespace {

namespace train = hvactor::train;

/// Each rank reports its shard's first image and the sum of every batch,
/// all read as torch::Tensor.
void tensor_loop(train::context& ctx) {
  auto& shard = train::get_dataset_shard("images");
  double sum = 0;
  int64_t rows = 0;
  for (auto& batch : shard.iter_batches(3, {.dtype = train::dtype::float32})) {
    torch::Tensor x = batch["x"];
    torch::Tensor label = batch["label"];
    if (x.dim() != 3 || x.size(1) != 2 || x.scalar_type() != torch::kFloat
        || label.scalar_type() != torch::kFloat)
      throw std::runtime_error("a batch of the wrong shape or dtype");
    sum += x.sum().item<double>() + label.sum().item<double>();
    rows += x.size(0);
  }
  torch::Tensor all = shard["x"];
  torch::Tensor loss = torch::tensor(0.5);
  train::report({{"loss", loss},
                 {"rank", ctx.world_rank()},
                 {"rows", rows},
                 {"first", all.numel() ? all[0][0][0].item<double>() : -1.0},
                 {"sum", sum}});
}

} // namespace

TEST_CASE("train::dataset::from_tensors: tensor shards reach every rank, batches are tensors") {
  auto x = torch::arange(10 * 4, torch::kDouble).reshape({10, 2, 2});
  auto label = torch::arange(10, torch::kInt);
  auto ds = train::dataset::from_tensors({{"x", x}, {"label", label}});
  CHECK((ds["label"].type() == train::dtype::int64));
  CHECK(ds["x"].shape() == std::vector<int64_t>{10, 2, 2});
  torch::Tensor back = ds["x"];
  CHECK(torch::equal(back, x));

  auto storage = std::filesystem::temp_directory_path() / ("hvactor-torch-train-" + std::to_string(::getpid()));
  train::trainer t{test_runtime(), &tensor_loop,
                   {.scaling = {.num_workers = 3},
                    .datasets = {{"images", ds}},
                    .run = {.name = "tensors", .storage_path = storage.string(), .verbose = 0}}};
  auto r = t.fit();
  std::filesystem::remove_all(storage);
  REQUIRE(!r.error);
  REQUIRE(r.worker_metrics_history.size() == 1);
  auto& ranks = r.worker_metrics_history[0];
  REQUIRE(ranks.size() == 3);
  // 10 rows over 3 ranks, equal shares: 3 each starting at rows 0, 3, 6 (4
  // elements each); row 9 is dropped.
  double first[] = {0, 12, 24};
  double total = 0;
  for (int k = 0; k < 3; ++k) {
    CHECK(ranks[k].at("rows").as_int() == 3);
    CHECK(ranks[k].at("first").as_double() == first[k]);
    total += ranks[k].at("sum").as_double();
  }
  CHECK(total
        == x.slice(0, 0, 9).sum().item<double>() + label.slice(0, 0, 9).sum().item<double>());
  CHECK(ranks[0].at("loss").as_double() == 0.5);
  // A metric tensor of more than one element is refused.
  CHECK_THROWS_AS(train::value{torch::ones({2})}, std::invalid_argument);
  CHECK(train::value{torch::tensor(3)}.is_int());
}
