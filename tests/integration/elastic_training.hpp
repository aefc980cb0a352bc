#pragma once

// The training function of elastic_driver's workers (after Horovod's
// test_ray_elastic_v2 _create_training_function): logs "started" once per
// process, trains epochs under hvd::elastic::run, commits every epoch and
// logs "finished". Every rank logs each commit with its rank, size and
// epoch. With LibTorch (HVACTOR_TEST_TORCH), a small model trained with a
// distributed optimizer and torch_state; the result is a checksum of its
// parameters, equal on every rank when they agree.

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <hvactor/hvactor.hpp>

#ifdef HVACTOR_TEST_TORCH
#include <hvactor/torch.hpp>
#include <hvactor/torch_state.hpp>
#endif

struct training_options {
  int32_t epochs = 20;
  int32_t epoch_ms = 50;
  bool fail = false;
  bool torch = false;
  /// Each commit's save() first logs "saving", then takes this long (a
  /// worker mid-commit while its host is removed).
  int32_t commit_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, training_options& x) {
  return f(caf::meta::type_name("training_options"), x.epochs, x.epoch_ms, x.fail, x.torch,
           x.commit_ms);
}

namespace training_detail {

namespace hvd = hvactor::hvd;

inline void log_event(const char* kind, int64_t epoch = -1) {
  hvactor::log::fields f{{"kind", kind},
                         {"pid", std::to_string(::getpid())},
                         {"worker", std::getenv("HVACTOR_ELASTIC_WORKER")
                                      ? std::getenv("HVACTOR_ELASTIC_WORKER")
                                      : "-"},
                         {"host", std::getenv("HOROVOD_HOSTNAME") ? std::getenv("HOROVOD_HOSTNAME")
                                                                 : "-"}};
  if (hvd::is_initialized()) {
    f["rank"] = std::to_string(hvd::rank());
    f["size"] = std::to_string(hvd::size());
  }
  if (epoch >= 0)
    f["epoch"] = std::to_string(epoch);
  hvactor::log::event(f);
}

// An epoch counter whose save() (inside commit()) logs "saving" and then
// takes commit_ms.
class slow_state : public hvd::elastic::object_state<int64_t> {
public:
  explicit slow_state(int32_t commit_ms) : object_state(0), commit_ms_(commit_ms) {
  }

  void save() override {
    if (commit_ms_ > 0) {
      log_event("saving", value<0>());
      std::this_thread::sleep_for(std::chrono::milliseconds(commit_ms_));
    }
    object_state::save();
  }

private:
  int32_t commit_ms_;
};

inline std::string plain(const training_options& o) {
  slow_state st{o.commit_ms};
  hvd::elastic::run(st, [&](auto& s) {
    auto& epoch = s.template value<0>();
    while (epoch < o.epochs) {
      if (o.fail)
        throw std::runtime_error("this worker fails on purpose");
      std::vector<float> grad(256, 1.0f);
      hvd::allreduce(std::span<float>(grad), hvd::op::sum);
      if (grad[0] != static_cast<float>(hvd::size()))
        throw std::runtime_error(fmt::format("allreduce gave {} with size {}", grad[0],
                                             hvd::size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(o.epoch_ms));
      ++epoch;
      s.commit();
      log_event("commit", epoch);
    }
  });
  return "ok";
}

#ifdef HVACTOR_TEST_TORCH
inline std::string torch_training(const training_options& o) {
  torch::manual_seed(static_cast<uint64_t>(::getpid())); // differs per process on purpose
  auto model = torch::nn::Linear(16, 4);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::elastic::torch_state st{model, sgd, {{"epoch", 0}}};
  hvd::elastic::run(st, [&](hvd::elastic::torch_state& s) {
    hvd::distributed_optimizer opt{sgd};
    while (s["epoch"] < o.epochs) {
      torch::manual_seed(static_cast<uint64_t>(s["epoch"] * 1000 + hvd::rank()));
      auto x = torch::randn({8, 16});
      auto y = torch::randn({8, 4});
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      opt.step();
      std::this_thread::sleep_for(std::chrono::milliseconds(o.epoch_ms));
      ++s["epoch"];
      s.commit();
      log_event("commit", s["epoch"]);
    }
  });
  double sum = 0;
  for (auto& p : model->parameters())
    sum += p.abs().sum().item<double>() + 7 * p.sum().item<double>();
  return fmt::format("{:.9g}", sum);
}
#endif

} // namespace training_detail

inline std::string elastic_train(training_options o) {
  namespace hvd = hvactor::hvd;
  hvd::init();
  training_detail::log_event("started");
  std::string out;
#ifdef HVACTOR_TEST_TORCH
  out = o.torch ? training_detail::torch_training(o) : training_detail::plain(o);
#else
  if (o.torch)
    throw std::runtime_error("this driver was built without LibTorch");
  out = training_detail::plain(o);
#endif
  training_detail::log_event("finished");
  return out;
}
