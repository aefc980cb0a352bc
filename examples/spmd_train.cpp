// spmd_train: the quickstart's training written SPMD style, like a script
// that horovodrun starts: every process calls hvd::init() itself (no
// hvactor::runtime, no executor). Launch it with
//   hvactor-run -np 3 -- ./spmd_train [--epochs N]

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

#include "mlp.hpp"

namespace hvd = hvactor::hvd;

int main(int argc, char** argv) {
  int epochs = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--epochs")
      epochs = std::atoi(argv[i + 1]);
  try {
    hvd::init(); // Horovod's environment comes from hvactor-run
    torch::set_num_threads(1);
    torch::manual_seed(42);
    auto model = quickstart::make_model();
    hvd::broadcast_parameters(model->parameters(), 0);

    torch::optim::SGD sgd{model->parameters(), torch::optim::SGDOptions(0.1)};
    hvd::distributed_optimizer optimizer{sgd};
    torch::nn::MSELoss loss_fn;

    auto [inputs, targets] = quickstart::shard(hvd::rank(), hvd::size());
    auto n = inputs.size(0);
    float last = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (int64_t b = 0; b < n; b += quickstart::batch_size) {
        auto e = std::min<int64_t>(n, b + quickstart::batch_size);
        optimizer.zero_grad();
        auto loss = loss_fn(model->forward(inputs.slice(0, b, e)), targets.slice(0, b, e));
        loss.backward();
        optimizer.step();
        last = loss.item<float>();
      }
      std::printf("rank %d epoch %d loss %.6f\n", hvd::rank(), epoch, last);
      std::fflush(stdout);
    }
    // The mean of every rank's last loss.
    auto mean = torch::tensor({last});
    hvd::allreduce(mean, hvd::op::average);
    if (hvd::rank() == 0)
      std::printf("final loss %.6f\n", mean.item<float>());
    hvd::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd_train failed: %s\n", e.what());
    return 1;
  }
}
