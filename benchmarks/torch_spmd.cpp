// torch_spmd: the C++ side of benchmarks/python_compare.py, an SPMD program
// under hvactor-run (what a LibTorch user runs):
//   torch_spmd step STEPS   MLP 1024-1024-1024-10, batch 32 per rank, SGD
//                           through hvd::distributed_optimizer; prints the
//                           median step ms of rank 0
//   torch_spmd call CALLS   a synchronous 4 B hvd::allreduce of a
//                           torch::Tensor (op::sum), in place; prints the
//                           mean us per call of rank 0
// python_spmd.py runs the same loops through hvactor.torch (and DDP).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "hvactor/torch.hpp"

namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double step_ms(int steps) {
  torch::manual_seed(42);
  torch::nn::Sequential net(torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                            torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                            torch::nn::Linear(1024, 10));
  hvd::broadcast_parameters(net->parameters(), 0);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  hvd::distributed_optimizer opt(sgd, net->named_parameters());
  torch::manual_seed(1000 + hvd::rank());
  auto x = torch::randn({32, 1024});
  auto y = torch::randint(0, 10, {32}, torch::kLong);
  std::vector<double> ms;
  for (int i = 0; i < steps + 5; ++i) {
    if (i == 5)
      hvd::barrier();
    auto t0 = clock_type::now();
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
    if (i >= 5)
      ms.push_back(ms_since(t0));
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

double call_us(int calls) {
  auto t = torch::ones({1}, torch::kFloat32);
  for (int i = 0; i < 100; ++i)
    hvd::allreduce(t, hvd::op::sum);
  hvd::barrier();
  auto t0 = clock_type::now();
  for (int i = 0; i < calls; ++i)
    hvd::allreduce(t, hvd::op::sum);
  return ms_since(t0) * 1000 / calls;
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? std::atoi(argv[2]) : 0;
  if ((mode != "step" && mode != "call") || n < 1) {
    std::fprintf(stderr, "usage: torch_spmd step STEPS | call CALLS (under hvactor-run)\n");
    return 2;
  }
  torch::set_num_threads(1);
  hvd::init();
  double v = mode == "step" ? step_ms(n) : call_us(n);
  if (hvd::rank() == 0)
    std::printf("RESULT %s %.4f\n", mode.c_str(), v);
  hvd::shutdown();
  return 0;
}
