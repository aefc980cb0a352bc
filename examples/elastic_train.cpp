// elastic_train: an elastic LibTorch job (horovod.ray's RayExecutor with
// min_workers, and hvd.elastic). Workers train the quickstart's MLP under
// hvd::elastic::run with a torch_state; the world grows and shrinks between
// --min-workers and --max-workers as nodes join and leave the cluster, and a
// killed worker or node costs at most one epoch (the last commit).
//
//   ./elastic_train --address HEAD:PORT [--min-workers 2] [--max-workers 3]
//                   [--epochs 100] [--epoch-ms 100] [--cpus-per-worker 2]
//                   [--cooldown LOWER UPPER]
// Without --address: the embedded local cluster (one host).

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>
#include <hvactor/torch.hpp>
#include <hvactor/torch_state.hpp>

#include "mlp.hpp"

namespace hvd = hvactor::hvd;

namespace {

struct train_config {
  int32_t epochs = 100;
  int32_t epoch_ms = 100;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_config& x) {
  return f(caf::meta::type_name("train_config"), x.epochs, x.epoch_ms);
}

/// Every worker runs this; it returns the final loss.
float train(train_config cfg) {
  hvd::init();
  auto model = quickstart::make_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  hvd::elastic::torch_state state{model, sgd, {{"epoch", 0}}};
  float loss = 0;
  state.register_reset_callback([&] {
    hvactor::log::event({{"reset", "1"}, {"size", std::to_string(hvd::size())}});
  });
  hvd::elastic::run(state, [&](hvd::elastic::torch_state& st) {
    hvd::distributed_optimizer opt{sgd};
    auto [x, y] = quickstart::shard(hvd::rank(), hvd::size());
    for (; st["epoch"] < cfg.epochs;) {
      opt.zero_grad();
      auto l = torch::mse_loss(model->forward(x), y);
      l.backward();
      opt.step();
      loss = l.item<float>();
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg.epoch_ms)); // "more data"
      ++st["epoch"];
      st.commit(); // saves the state, then checks for host changes
      if (hvd::rank() == 0)
        hvactor::log::event({{"epoch", std::to_string(st["epoch"])},
                             {"size", std::to_string(hvd::size())},
                             {"loss", std::to_string(loss)}});
    }
  });
  return loss;
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv};
  hvactor::executor_options opts{.min_workers = 2, .max_workers = 3, .cpus_per_worker = 2};
  train_config cfg;
  auto& args = rt.args();
  for (size_t i = 1; i < args.size(); ++i) {
    auto value = [&] { return i + 1 < args.size() ? std::stoi(args[++i]) : 0; };
    if (args[i] == "--min-workers")
      opts.min_workers = value();
    else if (args[i] == "--max-workers")
      opts.max_workers = value();
    else if (args[i] == "--epochs")
      cfg.epochs = value();
    else if (args[i] == "--epoch-ms")
      cfg.epoch_ms = value();
    else if (args[i] == "--cpus-per-worker")
      opts.cpus_per_worker = value();
    else if (args[i] == "--cooldown") {
      int lower = value();
      opts.cooldown_range = std::pair{lower, value()};
    } else {
      std::fprintf(stderr, "elastic_train: unknown option %s\n", args[i].c_str());
      return 2;
    }
  }
  try {
    auto settings = hvactor::executor::create_settings({.timeout = std::chrono::seconds(30)});
    hvactor::executor ex{rt, settings, opts};
    ex.on_event([](int rank, const std::map<std::string, std::string>& f) {
      std::string line = "[rank " + std::to_string(rank) + "]";
      for (auto& [k, v] : f)
        line += " " + k + "=" + v;
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    });
    std::printf("waiting for %d slots...\n", *opts.min_workers);
    ex.start();
    auto losses = ex.run(&train, cfg);
    std::printf("finished on %zu workers; final losses:", losses.size());
    for (float l : losses)
      std::printf(" %.6f", l);
    std::printf("\n");
    ex.shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
