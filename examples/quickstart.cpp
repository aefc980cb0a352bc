// quickstart: Ray Train's HorovodTrainer quickstart in C++. Three workers
// on the embedded local cluster train a 1 -> 15 -> 1 MLP to learn
// y = x + 1 with data-parallel SGD (hvd::distributed_optimizer); rank 0
// saves a checkpoint every epoch.
//   ./quickstart [--epochs N] [--workers N] [--checkpoint PATH]
// (--num-cpus and --address are the runtime's options)

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

#include "mlp.hpp"

namespace hvd = hvactor::hvd;

namespace {

/// The training function every worker runs; returns its loss per epoch.
std::vector<float> train_func(std::string checkpoint, int epochs) {
  hvd::init();
  quickstart::trainer t;
  std::vector<float> losses;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    float epoch_loss = t.epoch();
    losses.push_back(epoch_loss);
    std::printf("rank %d epoch %d loss %.6f\n", hvd::rank(), epoch, epoch_loss);
    std::fflush(stdout);
    if (hvd::rank() == 0)
      torch::save(t.model, checkpoint);
  }
  hvd::shutdown();
  return losses;
}

} // namespace

int main(int argc, char** argv) {
  // Enough CPUs for --workers on the embedded cluster, even on a 2-core
  // machine (a worker process is the same binary: scanning argv is all
  // that happens before the runtime takes over).
  int workers = 3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--workers")
      workers = std::max(1, std::atoi(argv[i + 1]));
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv, {.num_cpus = std::max(3, workers)}};
  int epochs = 3;
  std::string checkpoint;
  auto& args = rt.args();
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] == "--epochs")
      epochs = std::stoi(args[i + 1]);
    else if (args[i] == "--checkpoint")
      checkpoint = args[i + 1];
  }
  try {
    if (checkpoint.empty()) {
      auto dir = std::filesystem::temp_directory_path() /
                 ("hvactor-quickstart-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir);
      checkpoint = (dir / "model.pt").string();
    } else if (auto parent = std::filesystem::path(checkpoint).parent_path(); !parent.empty()) {
      std::filesystem::create_directories(parent);
    }

    hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = workers}};
    ex.start();
    std::vector<std::vector<float>> losses = ex.run(&train_func, checkpoint, epochs);
    ex.shutdown();

    for (size_t r = 0; r < losses.size(); ++r)
      std::printf("worker %zu final loss %.6f\n", r, losses[r].empty() ? 0.0f : losses[r].back());
    std::printf("checkpoint %s\n", checkpoint.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart failed: %s\n", e.what());
    return 1;
  }
}
