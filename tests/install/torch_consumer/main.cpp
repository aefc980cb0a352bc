// An SPMD LibTorch program against an installed hvactor, run as
// `hvactor-run -np 2 -- hvactor_torch_consumer`: one step of
// hvd::distributed_optimizer on Linear(4, 1), each rank on its own batch.
// Every rank checks its parameters against the step it computes itself from
// every rank's batch (the averaged gradient); rank 0 prints
// "torch consumer ok" when all ranks agree.

#include <cstdio>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

namespace hvd = hvactor::hvd;

namespace {

torch::Tensor batch_of(int rank) {
  return torch::arange(8, torch::kFloat).reshape({2, 4}) * (rank + 1);
}

torch::Tensor flat(torch::nn::Linear& l) {
  return torch::cat({l->weight.detach().flatten(), l->bias.detach().flatten()});
}

} // namespace

int main() {
  hvd::init();
  torch::manual_seed(hvd::rank() + 1); // different weights until the broadcast
  torch::nn::Linear l(4, 1);
  hvd::broadcast_parameters(l->parameters(), 0);
  auto start = flat(l);

  torch::optim::SGD sgd(l->parameters(), 0.01);
  hvd::distributed_optimizer opt(sgd);
  opt.zero_grad();
  torch::mse_loss(l(batch_of(hvd::rank())), torch::ones({2, 1})).backward();
  opt.step();

  // The same step by hand: the mean of every rank's gradient.
  torch::nn::Linear ref(4, 1);
  {
    torch::NoGradGuard no_grad;
    ref->weight.copy_(start.narrow(0, 0, 4).reshape({1, 4}));
    ref->bias.copy_(start.narrow(0, 4, 1));
  }
  for (int r = 0; r < hvd::size(); ++r)
    (torch::mse_loss(ref(batch_of(r)), torch::ones({2, 1})) / hvd::size()).backward();
  torch::optim::SGD(ref->parameters(), 0.01).step();

  double error = (flat(l) - flat(ref)).abs().max().item<double>();
  auto worst = torch::tensor({error}, torch::kDouble);
  hvd::allreduce(worst, hvd::op::max);
  bool moved = !torch::equal(flat(l), start);
  if (hvd::rank() == 0)
    std::printf("%s: %d ranks, largest difference from the hand-made step %.3g\n",
                worst.item<double>() < 1e-6 && moved ? "torch consumer ok" : "torch consumer FAILED",
                hvd::size(), worst.item<double>());
  hvd::shutdown();
  return worst.item<double>() < 1e-6 && moved ? 0 : 1;
}
