// The example programs, run as child processes the way a user runs them:
// stateful (always), quickstart and spmd_train under hvactor-run (with
// LibTorch). The quickstart's checkpoint is loaded back here.

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

#ifdef HVACTOR_HAVE_TORCH

TEST_CASE("quickstart: three workers learn, rank 0's checkpoint loads") {
  temp_dir dir;
  auto checkpoint = dir.path() / "ckpt" / "model.pt";
  auto r = run_command({HVACTOR_EXAMPLE_QUICKSTART, "--checkpoint", checkpoint.string()},
                       dir.path() / "quickstart", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto losses = epoch_losses(r.out);
  REQUIRE(losses.size() == 3);
  for (auto& [rank, epochs] : losses) {
    CAPTURE(rank);
    REQUIRE(epochs.size() == 3);
    CHECK(epochs.count(0) == 1);
    CHECK(epochs.count(2) == 1);
    CHECK(std::isfinite(epochs[2]));
    CHECK(epochs[2] < epochs[0]);
  }
  for (int rank = 0; rank < 3; ++rank)
    CHECK(r.out.find("worker " + std::to_string(rank) + " final loss ") != std::string::npos);
  CHECK(r.out.find("checkpoint " + checkpoint.string()) != std::string::npos);

  REQUIRE(std::filesystem::exists(checkpoint));
  auto model = quickstart::make_model();
  torch::load(model, checkpoint.string());
  auto y = model->forward(torch::tensor({0.5f}).reshape({1, 1}));
  CHECK(y.numel() == 1);
  CHECK(std::isfinite(y.item<float>()));
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
