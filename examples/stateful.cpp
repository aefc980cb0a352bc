// stateful: an executable object in every worker (RayExecutor.start with
// executable_cls). MyModel's constructor joins the collectives and takes
// rank 0's weights; train() averages a rank-dependent fake gradient with
// hvd::allreduce and steps, so every copy stays identical.
//   ./stateful [--steps N]
// (--num-cpus and --address are the runtime's options)

#include <cstdio>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

class MyModel {
public:
  explicit MyModel(float lr) : lr_(lr), weights_(4) {
    hvd::init();
    // Different per rank ...
    for (size_t i = 0; i < weights_.size(); ++i)
      weights_[i] = static_cast<float>(hvd::rank() * 10 + static_cast<int>(i));
    // ... until rank 0's weights win.
    hvd::broadcast(std::span<float>(weights_), 0);
  }

  /// One SGD step on the average of every rank's gradient.
  void train() {
    std::vector<float> grad(weights_.size());
    for (size_t i = 0; i < grad.size(); ++i)
      grad[i] = 0.1f * static_cast<float>((hvd::rank() + 1) * static_cast<int>(i + 1));
    hvd::allreduce(std::span<float>(grad), hvd::op::average);
    for (size_t i = 0; i < grad.size(); ++i)
      weights_[i] -= lr_ * grad[i];
    ++steps_;
  }

  std::vector<float> get_weights() {
    return weights_;
  }

private:
  float lr_;
  std::vector<float> weights_;
  int steps_ = 0;
};

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv, {.num_cpus = 4}};
  int steps = 5;
  for (size_t i = 1; i + 1 < rt.args().size(); ++i)
    if (rt.args()[i] == "--steps")
      steps = std::stoi(rt.args()[i + 1]);
  try {
    hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = 4}};
    ex.start<MyModel>(0.1f);
    for (int s = 0; s < steps; ++s)
      ex.execute(&MyModel::train);
    std::vector<std::vector<float>> copies = ex.execute(&MyModel::get_weights);
    bool identical = true;
    for (size_t r = 0; r < copies.size(); ++r) {
      std::printf("rank %zu weights:", r);
      for (float w : copies[r])
        std::printf(" %.4f", w);
      std::printf("\n");
      identical = identical && copies[r] == copies[0];
    }
    if (identical)
      std::printf("all %zu copies identical after %d steps\n", copies.size(), steps);
    else
      std::printf("COPIES DIFFER after %d steps\n", steps);
    ex.shutdown();
    return identical && copies.size() == 4 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stateful failed: %s\n", e.what());
    return 1;
  }
}
