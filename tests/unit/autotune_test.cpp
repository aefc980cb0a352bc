// Autotune's pieces without processes: the Bayesian optimisation finds the
// maximum of a noisy function of (fusion MiB, cycle ms), and the parameter
// manager walks Horovod's steps (warm-up, the start and the test points,
// the optimiser's points, the hierarchical switches, the best values,
// the log) on synthetic timings.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/tuning/autotune.hpp"
#include "collectives/tuning/bayesian_optimization.hpp"

using hvactor::collectives::autotune_settings;
using hvactor::collectives::bayesian_optimization;
using hvactor::collectives::parameter_manager;
using hvactor::collectives::tuned_params;

namespace {

// A throughput surface with one peak at (24 MiB, 8 ms).
double surface(double mib, double ms) {
  return 100.0 - std::pow((mib - 24) / 8, 2) - std::pow((ms - 8) / 10, 2);
}

} // namespace

TEST_SUITE("autotune") {

TEST_CASE("the Bayesian optimisation gets near the maximum of a noisy surface in 20 samples") {
  bayesian_optimization bo({{0, 64}, {1, 100}}, 0.2, 7);
  std::mt19937_64 gen(3);
  std::normal_distribution<double> noise(0, 0.5);
  std::vector<std::vector<double>> points{{4, 5}, {32, 50}, {16, 25}, {8, 10}};
  double best = -1e9;
  for (int i = 0; i < 24; ++i) {
    auto x = i < 4 ? points[static_cast<size_t>(i)] : bo.next_sample();
    REQUIRE(x.size() == 2);
    CHECK(x[0] >= 0);
    CHECK(x[0] <= 64);
    CHECK(x[1] >= 1);
    CHECK(x[1] <= 100);
    double y = surface(x[0], x[1]);
    best = std::max(best, y);
    bo.add_sample(x, y + noise(gen));
  }
  // The test points alone reach 100 - 4 - 0.04 at best (16, 25): 93.1.
  CHECK(best > 98.5);
  // The surrogate ranks the peak above a far corner.
  bo.next_sample();
  CHECK(bo.predict({24, 8}).first > bo.predict({60, 90}).first);
}

TEST_CASE("the parameter manager scores the start, the test points and the optimiser's points, "
          "then the hierarchical switches, and ends with the best") {
  auto log = std::filesystem::temp_directory_path() / "hvactor-autotune-test.csv";
  autotune_settings s{.enabled = true,
                      .log_file = log.string(),
                      .warmup_samples = 2,
                      .steps_per_sample = 3,
                      .bayes_opt_max_samples = 12,
                      .gaussian_process_noise = 0.1};
  tuned_params start{.fusion_threshold = 0, .cycle_time_us = 20000};
  parameter_manager pm(s, start, true);
  CHECK(pm.knobs() == "tuned: hierarchical_allreduce, hierarchical_allgather, cycle_time_ms, "
                      "tensor_fusion_threshold; fixed: cache_capacity = as set (hvactor does not "
                      "tune the response cache)");
  CHECK(pm.proposal().active);
  CHECK(pm.proposal().fusion_threshold == 0);
  auto now = std::chrono::steady_clock::time_point{};
  std::vector<tuned_params> tried;
  int scored_changes = 0;
  for (int step = 0; step < 100000 && pm.proposal().active; ++step) {
    const auto& p = pm.proposal();
    // One step: 4 tensors of 1 MiB; it takes longer the farther the values
    // are from the peak, and less with the hierarchical allreduce on.
    double mib = static_cast<double>(p.fusion_threshold) / (1 << 20);
    double ms = static_cast<double>(p.cycle_time_us) / 1000;
    double speed = surface(mib, ms) * (p.hierarchical_allreduce ? 1.1 : 1.0);
    auto step_time = std::chrono::microseconds(static_cast<int64_t>(4e6 / std::max(speed, 1.0)));
    for (int t = 0; t < 4; ++t) {
      now += step_time / 4;
      if (pm.observe("grad." + std::to_string(t), 1 << 20, now)) {
        ++scored_changes;
        tried.push_back(pm.proposal());
      }
    }
  }
  REQUIRE_FALSE(pm.proposal().active);
  // Warm-up scores change nothing; then the start and Horovod's test
  // points, in order.
  REQUIRE(tried.size() >= 5);
  CHECK(tried[0].fusion_threshold == 4 << 20);
  CHECK(tried[0].cycle_time_us == 5000);
  CHECK(tried[1].fusion_threshold == 32 << 20);
  CHECK(tried[2].fusion_threshold == 16 << 20);
  CHECK(tried[3].fusion_threshold == 8 << 20);
  // 13 joint points, then each hierarchical switch flipped once, then final.
  CHECK(scored_changes == 13 + 2);
  const auto& best = pm.proposal();
  CHECK(best.hierarchical_allreduce);
  CHECK_FALSE(best.hierarchical_allgather);
  double best_mib = static_cast<double>(best.fusion_threshold) / (1 << 20);
  double best_ms = static_cast<double>(best.cycle_time_us) / 1000;
  CAPTURE(best_mib);
  CAPTURE(best_ms);
  CHECK(surface(best_mib, best_ms) > 97);
  // The log: a header, one line per scored point, the best last.
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  REQUIRE(lines.size() == 1 + 15 + 1);
  CHECK(lines[0] == "hierarchical_allreduce,hierarchical_allgather,cycle_time_ms,"
                    "tensor_fusion_threshold,score,fixed");
  CHECK(lines[1].ends_with(",cache_capacity")); // the only fixed knob here
  CHECK(lines[1].rfind("0,0,20,0,", 0) == 0); // the mistuned start, scored first
  std::filesystem::remove(log);
}

TEST_CASE("without a hierarchical path only the joint values are tuned") {
  autotune_settings s{.enabled = true, .warmup_samples = 0, .steps_per_sample = 1,
                      .bayes_opt_max_samples = 4};
  parameter_manager pm(s, {.fusion_threshold = 64 << 20, .cycle_time_us = 1000}, false);
  auto now = std::chrono::steady_clock::time_point{};
  int changes = 0;
  for (int i = 0; i < 10000 && pm.proposal().active; ++i) {
    now += std::chrono::milliseconds(1);
    changes += pm.observe("t", 1000, now) ? 1 : 0;
    CHECK_FALSE(pm.proposal().hierarchical_allreduce);
  }
  CHECK_FALSE(pm.proposal().active);
  CHECK(changes == 5);
}

namespace {

// Drives `pm` with steps whose time depends on the values (the surface's
// peak), 4 tensors a step, until it is final; returns every proposal it
// changed to.
std::vector<tuned_params> tune_to_the_end(parameter_manager& pm) {
  auto now = std::chrono::steady_clock::time_point{};
  std::vector<tuned_params> tried;
  for (int step = 0; step < 100000 && pm.proposal().active; ++step) {
    const auto& p = pm.proposal();
    double mib = static_cast<double>(p.fusion_threshold) / (1 << 20);
    double ms = static_cast<double>(p.cycle_time_us) / 1000;
    double speed = surface(mib, ms) * (p.hierarchical_allgather ? 1.1 : 1.0);
    auto step_time = std::chrono::microseconds(static_cast<int64_t>(4e6 / std::max(speed, 1.0)));
    for (int t = 0; t < 4; ++t) {
      now += step_time / 4;
      if (pm.observe("grad." + std::to_string(t), 1 << 20, now))
        tried.push_back(pm.proposal());
    }
  }
  return tried;
}

} // namespace

TEST_CASE("a fusion threshold set explicitly stays as set while the cycle time alone is tuned "
          "(Horovod's), and the log says which knobs are fixed") {
  auto log = std::filesystem::temp_directory_path() / "hvactor-autotune-fixed-test.csv";
  autotune_settings s{.enabled = true,
                      .log_file = log.string(),
                      .warmup_samples = 0,
                      .steps_per_sample = 2,
                      .bayes_opt_max_samples = 8,
                      .gaussian_process_noise = 0.1,
                      .fusion_threshold_set = true};
  parameter_manager pm(s, {.fusion_threshold = 0, .cycle_time_us = 20000}, false);
  CHECK(pm.knobs() == "tuned: cycle_time_ms; fixed: hierarchical_allreduce = false (no "
                      "hierarchical path here), hierarchical_allgather = false (no hierarchical "
                      "path here), tensor_fusion_threshold = 0 mb (set by "
                      "HOROVOD_FUSION_THRESHOLD), cache_capacity = as set (hvactor does not tune "
                      "the response cache)");
  auto tried = tune_to_the_end(pm);
  REQUIRE_FALSE(pm.proposal().active);
  // The test points' cycle times (5, 50, 25, 10 ms), then the optimiser's
  // over 1-100 ms, all at the threshold as set.
  REQUIRE(tried.size() == 9);
  CHECK(tried[0].cycle_time_us == 5000);
  CHECK(tried[1].cycle_time_us == 50000);
  CHECK(tried[2].cycle_time_us == 25000);
  CHECK(tried[3].cycle_time_us == 10000);
  for (auto& p : tried) {
    CHECK(p.fusion_threshold == 0);
    CHECK(p.cycle_time_us >= 1000);
    CHECK(p.cycle_time_us <= 100000);
  }
  // The best cycle time for a threshold of 0 is the surface's, 8 ms.
  CHECK(std::abs(static_cast<double>(pm.proposal().cycle_time_us) / 1000 - 8) < 5);
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    lines.push_back(l);
  REQUIRE(lines.size() == 1 + 9 + 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    CAPTURE(lines[i]);
    CHECK(lines[i].ends_with(",hierarchical_allreduce;hierarchical_allgather;"
                             "tensor_fusion_threshold;cache_capacity"));
  }
  std::filesystem::remove(log);
}

TEST_CASE("a cycle time set explicitly stays as set while the fusion threshold is tuned; a set "
          "hierarchical switch is not tried; with everything set nothing is tuned") {
  autotune_settings s{.enabled = true, .warmup_samples = 0, .steps_per_sample = 1,
                      .bayes_opt_max_samples = 4, .cycle_time_set = true,
                      .hierarchical_allreduce_set = true};
  parameter_manager pm(s, {.fusion_threshold = 64 << 20, .cycle_time_us = 3000}, true);
  auto tried = tune_to_the_end(pm);
  REQUIRE_FALSE(pm.proposal().active);
  // 4 joint points after the start, then the allgather switch; the
  // allreduce switch, set, stays off.
  REQUIRE(tried.size() == 4 + 1 + 1);
  CHECK(tried[0].fusion_threshold == 4 << 20);
  CHECK(tried[1].fusion_threshold == 32 << 20);
  for (auto& p : tried) {
    CHECK(p.cycle_time_us == 3000);
    CHECK_FALSE(p.hierarchical_allreduce);
  }
  CHECK(tried[4].hierarchical_allgather);
  CHECK(pm.proposal().hierarchical_allgather); // faster on the surface

  autotune_settings all = s;
  all.fusion_threshold_set = all.hierarchical_allgather_set = true;
  parameter_manager none(all, {.fusion_threshold = 1 << 20, .cycle_time_us = 3000}, true);
  CHECK_FALSE(none.proposal().active);
  CHECK(none.knobs().rfind("tuned: none; fixed: hierarchical_allreduce = false (set by "
                           "HOROVOD_HIERARCHICAL_ALLREDUCE), ",
                           0) == 0);
  CHECK_FALSE(none.observe("t", 1000, std::chrono::steady_clock::time_point{}));
}

TEST_CASE("HVACTOR_AUTOTUNE_SET_KNOBS=start tunes the set knobs from their values") {
  autotune_settings s{.enabled = true, .warmup_samples = 0, .steps_per_sample = 1,
                      .bayes_opt_max_samples = 4, .fusion_threshold_set = true,
                      .cycle_time_set = true, .start_from_set = true};
  parameter_manager pm(s, {.fusion_threshold = 0, .cycle_time_us = 20000}, false);
  CHECK(pm.knobs().rfind("tuned: cycle_time_ms, tensor_fusion_threshold; ", 0) == 0);
  auto tried = tune_to_the_end(pm);
  REQUIRE(tried.size() == 5);
  CHECK(tried[0].fusion_threshold == 4 << 20);
  CHECK(tried[0].cycle_time_us == 5000);
}

TEST_CASE("a log file that cannot be written leaves tuning as it is (Horovod's)") {
  autotune_settings s{.enabled = true, .log_file = "/nonexistent-dir/autotune.csv",
                      .warmup_samples = 0, .steps_per_sample = 1, .bayes_opt_max_samples = 0};
  parameter_manager pm(s, {}, false);
  auto now = std::chrono::steady_clock::time_point{};
  for (int i = 0; i < 100 && pm.proposal().active; ++i) {
    now += std::chrono::milliseconds(1);
    pm.observe("t", 1000, now);
  }
  CHECK_FALSE(pm.proposal().active);
}

} // TEST_SUITE
