// hvactor::tune: Ray Tune's "Tuner(HorovodTrainer(...), param_space=...,
// tune_config=TuneConfig(scheduler=ASHAScheduler()))". Eight trials of two
// workers each search a learning rate and a momentum for gradient descent
// on a quadratic (its gradient averaged over the workers by allreduce);
// ASHA stops the bad ones early.
//
//   tune_search [--storage-path DIR] [--samples N]

#include <chrono>
#include <cstdio>
#include <iostream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>
#include <hvactor/tune.hpp>

namespace train = hvactor::train;
namespace tune = hvactor::tune;

// --8<-- [start:loop]
// Every trial's workers run this loop with the trial's config.
void train_loop(train::context& ctx) {
  double lr = ctx.config().at("lr").as_double();
  double momentum = ctx.config().at("momentum").as_double();
  hvactor::hvd::init();
  // Minimise (w - 3)^2; each worker's gradient is averaged with the others'.
  double w = 0, v = 0;
  for (int step = 1; step <= 20; ++step) {
    std::vector<double> grad{2 * (w - 3)};
    hvactor::hvd::allreduce(std::span<double>{grad}, hvactor::hvd::op::average);
    v = momentum * v + grad[0];
    w -= lr * v;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    train::report({{"loss", (w - 3) * (w - 3)}});
  }
}
// --8<-- [end:loop]

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  std::string storage;
  int samples = 8;
  for (size_t i = 1; i + 1 < rt.args().size(); ++i) {
    if (rt.args()[i] == "--storage-path")
      storage = rt.args()[i + 1];
    if (rt.args()[i] == "--samples")
      samples = std::stoi(rt.args()[i + 1]);
  }
  // --8<-- [start:tuner]
  tune::trainer_factory trainer{train_loop, {.scaling = {.num_workers = 2}}};
  tune::tuner tuner{rt, trainer,
                    {.param_space = {{"lr", tune::loguniform(1e-3, 1.0)},
                                     {"momentum", tune::uniform(0.0, 0.9)}},
                     .tune_config = {.metric = "loss",
                                     .mode = "min",
                                     .num_samples = samples,
                                     .scheduler = std::make_shared<tune::asha_scheduler>(
                                       tune::asha_scheduler::options{.max_t = 20})},
                     .run = {.name = "tune_search", .storage_path = storage}}};
  auto results = tuner.fit();
  auto& best = results.get_best_result();
  std::cout << "Best trial: " << best.trial_id << " lr=" << best.config.at("lr").to_string()
            << " momentum=" << best.config.at("momentum").to_string()
            << " loss=" << best.metrics.at("loss").to_string() << "\n";
  // --8<-- [end:tuner]
  std::cout << results;
  return results.num_errors() == 0 ? 0 : 1;
}
