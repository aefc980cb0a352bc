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
    quickstart::trainer t;
    float last = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      last = t.epoch();
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
