// The example programs, run as child processes the way a user runs them:
// stateful (always), quickstart, horovod_runner and spmd_train under
// hvactor-run (with LibTorch). The quickstart's checkpoints are loaded back
// here.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#ifdef HVACTOR_HAVE_TORCH
// LibTorch first: it defines glog's CHECK, which must not replace doctest's.
#include <torch/torch.h>

#include "mlp.hpp"
#undef CHECK
#endif

#include <doctest/doctest.h>

#include "child_process.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

/// "rank R epoch E loss L" lines anywhere in `text` (an optional tag like
/// hvactor-run's "[1,R]<stdout>:" before them): rank -> epoch -> loss.
std::map<int, std::map<int, double>> epoch_losses(const std::string& text) {
  static const std::regex re{R"(rank (\d+) epoch (\d+) loss ([-+0-9.eE]+|nan|inf))"};
  std::map<int, std::map<int, double>> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re))
      out[std::stoi(m[1])][std::stoi(m[2])] = std::stod(m[3]);
  }
  return out;
}

std::string describe(const command_result& r) {
  return "exit " + std::to_string(r.status.code) + " signal " + std::to_string(r.status.signal) +
         "\n--- stdout\n" + r.out + "\n--- stderr\n" + r.err;
}

} // namespace

TEST_CASE("stateful: four workers hold identical weights after five steps") {
  temp_dir dir;
  auto r = run_command({HVACTOR_EXAMPLE_STATEFUL}, dir.path() / "stateful", 120s);
  INFO(describe(r));
  CHECK(r.status.success());
  CHECK(r.out.find("all 4 copies identical after 5 steps") != std::string::npos);
}

TEST_CASE("tune_search: ASHA over eight two-worker trials finds a low loss and keeps the "
          "experiment") {
  temp_dir dir;
  auto r = run_command({HVACTOR_EXAMPLE_TUNE_SEARCH, "--storage-path", dir.path().string()},
                       dir.path() / "tune_search", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex{"Best trial: (trial_\\d+) .* loss=(\\S+)"}));
  // 20 steps of gradient descent on (w - 3)^2 from w = 0 (loss 9): the
  // best of eight sampled rates is far below where it started.
  CHECK(std::stod(m[2]) < 1.0);
  CHECK(r.out.find("Number of trials: 8/8 (8 TERMINATED)") != std::string::npos);
  auto exp = dir.path() / "tune_search";
  CHECK(std::filesystem::exists(exp / "experiment_state.json"));
  CHECK(std::filesystem::exists(exp / m[1].str() / "result.json"));
  CHECK(std::filesystem::exists(exp / m[1].str() / "params.json"));
}

#ifdef HVACTOR_HAVE_TORCH

// The quickstart's model, as examples/quickstart.cpp defines it (its
// checkpoints load into a fresh one).
struct NeuralNetworkImpl : torch::nn::Module {
  NeuralNetworkImpl()
      : layer1(register_module("layer1", torch::nn::Linear(1, 15))),
        relu(register_module("relu", torch::nn::ReLU())),
        layer2(register_module("layer2", torch::nn::Linear(15, 1))) {
  }
  torch::Tensor forward(torch::Tensor input) {
    return layer2(relu(layer1(input)));
  }
  torch::nn::Linear layer1;
  torch::nn::ReLU relu;
  torch::nn::Linear layer2;
};
TORCH_MODULE(NeuralNetwork);

/// MSE of a checkpoint's model over the whole quickstart dataset (x, x + 1
/// for x in 0..31, scaled by 1/32 as the loop does).
double dataset_loss(const std::filesystem::path& checkpoint_dir) {
  NeuralNetwork model;
  torch::load(model, (checkpoint_dir / "model.pt").string());
  auto x = torch::arange(32, torch::kFloat).reshape({32, 1});
  auto y = (x + 1) / 32;
  return torch::mse_loss(model->forward(x / 32), y).item<double>();
}

TEST_CASE("quickstart: HorovodTrainer's quickstart on hvactor::train; the loss falls, checkpoints load") {
  temp_dir dir;
  auto r = run_command({HVACTOR_EXAMPLE_QUICKSTART, "--storage-path", dir.path().string(),
                        "--epochs", "10"},
                       dir.path() / "quickstart", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto run = dir.path() / "quickstart";
  // Every worker printed its loss every epoch; the driver a line per report.
  for (int epoch : {0, 9})
    CHECK(r.out.find("epoch: " + std::to_string(epoch) + ", loss: ") != std::string::npos);
  CHECK(r.out.find("[quickstart] iter 10 |") != std::string::npos);
  CHECK(r.out.find("workers 3/3") != std::string::npos);
  CHECK(r.out.find("Result(metrics={") != std::string::npos);
  CHECK(r.out.find("'training_iteration': 10") != std::string::npos);
  CHECK(r.out.find("checkpoint=Checkpoint(path='" + (run / "checkpoint_000009").string() + "')")
        != std::string::npos);
  for (int i = 0; i < 10; ++i)
    CHECK(std::filesystem::exists(run / ("checkpoint_00000" + std::to_string(i)) / "model.pt"));
  auto first = dataset_loss(run / "checkpoint_000000");
  auto last = dataset_loss(run / "checkpoint_000009");
  CAPTURE(first);
  CAPTURE(last);
  CHECK(std::isfinite(last));
  CHECK(last < first);
}

TEST_CASE("horovod_runner example: np = 2 and np = -2 return rank 0's loss, output tagged") {
  temp_dir dir;
  auto r = run_command({HVACTOR_EXAMPLE_HOROVOD_RUNNER}, dir.path() / "hr", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  CHECK(r.out.find("np=2: rank 0's final loss ") != std::string::npos);
  CHECK(r.out.find("np=-2: rank 0's final loss ") != std::string::npos);
  auto losses = epoch_losses(r.out);
  REQUIRE(losses.size() == 2);
  CHECK(r.out.find("[1,1]<stdout>:rank 1 epoch 2 loss ") != std::string::npos);
  CHECK(r.out.find("[1,0]<event>:epoch=2 loss=") != std::string::npos);
}

TEST_CASE("spmd_train under hvactor-run -np 3") {
  temp_dir dir;
  auto r = run_command({HVACTOR_RUN, "-np", "3", "--", HVACTOR_EXAMPLE_SPMD_TRAIN},
                       dir.path() / "spmd", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto losses = epoch_losses(r.out);
  REQUIRE(losses.size() == 3);
  for (auto& [rank, epochs] : losses) {
    CAPTURE(rank);
    CHECK(epochs.size() == 3);
    CHECK(epochs[2] < epochs[0]);
  }
  CHECK(r.out.find("[1,0]<stdout>:final loss ") != std::string::npos);
}

#endif
