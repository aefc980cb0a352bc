// horovod_runner: Databricks' HorovodRunner in C++.
//
//   hr = HorovodRunner(np=2)            hvactor::horovod_runner hr{rt, {.np = 2}};
//   loss = hr.run(train, epochs=3)      double loss = hr.run(&train, 3);
//
// np = 2 runs two workers on the cluster (the embedded one here, or the
// cluster of --address); np = -2 runs two processes on the driver's
// machine only. Every worker's output reaches the driver tagged by rank
// ("all"); with --log-callback-only only hvactor::log::event records do.
//   ./horovod_runner [--np N] [--epochs N] [--log-callback-only]

#include <cstdio>
#include <string>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>

#include "mlp.hpp"

namespace hvd = hvactor::hvd;

/// The function HorovodRunner runs on every worker; returns its final loss
/// (the driver gets rank 0's).
double train(int epochs) {
  hvd::init();
  quickstart::trainer t;
  double loss = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loss = t.epoch();
    std::printf("rank %d epoch %d loss %.6f\n", hvd::rank(), epoch, loss);
    hvactor::log::event({{"epoch", std::to_string(epoch)}, {"loss", std::to_string(loss)}});
  }
  hvd::shutdown();
  return loss;
}

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 2}};
  int np = 0, epochs = 3;
  std::string verbosity = "all";
  auto& args = rt.args();
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--np" && i + 1 < args.size())
      np = std::stoi(args[++i]);
    else if (args[i] == "--epochs" && i + 1 < args.size())
      epochs = std::stoi(args[++i]);
    else if (args[i] == "--log-callback-only")
      verbosity = "log_callback_only";
  }
  try {
    for (int n : np != 0 ? std::vector<int>{np} : std::vector<int>{2, -2}) {
      hvactor::horovod_runner hr{rt, {.np = n, .driver_log_verbosity = verbosity}};
      double loss = hr.run(&train, epochs);
      std::printf("np=%d: rank 0's final loss %.6f\n", n, loss);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "horovod_runner failed: %s\n", e.what());
    return 1;
  }
}
