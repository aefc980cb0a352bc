#pragma once

// Internal: autotune (HOROVOD_AUTOTUNE), Horovod's ParameterManager
// (horovod/common/parameter_manager.cc) for the engine's knobs.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/tuning/bayesian_optimization.hpp"

namespace hvactor::collectives {

/// HOROVOD_AUTOTUNE and its knobs (read once at hvd::init).
struct autotune_settings {
  bool enabled = false;
  /// HOROVOD_AUTOTUNE_LOG: rank 0 writes every scored sample there (CSV).
  std::string log_file;
  /// HOROVOD_AUTOTUNE_WARMUP_SAMPLES: scores thrown away first.
  int warmup_samples = 3;
  /// HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE: a sample ends when a tensor was
  /// seen this many more times.
  int steps_per_sample = 10;
  /// HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES: points of the (fusion
  /// threshold, cycle time) space scored before the best is kept.
  int bayes_opt_max_samples = 20;
  /// HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, in [0, 1].
  double gaussian_process_noise = 0.8;
  /// The knobs set explicitly (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME,
  /// HOROVOD_HIERARCHICAL_ALLREDUCE, _ALLGATHER): as in Horovod, tuning
  /// keeps them as set and tunes the others.
  bool fusion_threshold_set = false;
  bool cycle_time_set = false;
  bool hierarchical_allreduce_set = false;
  bool hierarchical_allgather_set = false;
  /// HVACTOR_AUTOTUNE_SET_KNOBS=start (hvactor's): a set knob is where
  /// tuning starts, tuned like the others, instead of fixed.
  bool start_from_set = false;
};

/// The knobs autotune sets, as every rank applies them.
struct tuned_params {
  int64_t fusion_threshold = 0; // bytes
  int64_t cycle_time_us = 0;
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  /// Still tuning (false: these are the best values, final).
  bool active = true;

  bool operator==(const tuned_params&) const = default;
};

/// Rank 0's tuner. Every finished operation is observed; a sample ends
/// when some tensor (by name; unnamed ones by kind, dtype and size) was
/// seen steps_per_sample more times, and scores bytes per microsecond;
/// the median of 5 samples scores the current values. After the warm-up,
/// the values go through (1) the fusion threshold (0-64 MiB) and cycle
/// time (1-100 ms) jointly: the values in force at the start, Horovod's
/// four test points, then Bayesian optimisation up to
/// bayes_opt_max_samples points; then, with the best of those, (2) the
/// hierarchical allreduce and (3) allgather switches, both ways, where
/// the job's layout has a hierarchical path. Then the best values are
/// final (active false). A knob set explicitly stays fixed (Horovod's):
/// the joint search runs over the other variable alone (the test points
/// without the fixed one), a set switch is not tried; with nothing left
/// to tune the values are final at once. Not thread-safe (the engine's
/// round driver).
class parameter_manager {
public:
  parameter_manager(const autotune_settings& s, const tuned_params& start,
                    bool hierarchical_tunable);

  /// An operation of `bytes` finished at `now`; true when the proposal
  /// changed (the engine then hands it to every rank).
  bool observe(const std::string& key, int64_t bytes,
               std::chrono::steady_clock::time_point now);

  /// The values to run with now.
  const tuned_params& proposal() const {
    return current_;
  }

  /// One line per scored sample and the final choice: what is logged
  /// (and written to HOROVOD_AUTOTUNE_LOG).
  static std::string describe(const tuned_params& p);

  /// What is tuned and what is fixed, and why, as logged at the start:
  /// "tuned: cycle_time_ms; fixed: tensor_fusion_threshold = 0 mb
  /// (HOROVOD_FUSION_THRESHOLD), ...".
  const std::string& knobs() const {
    return knobs_;
  }

private:
  bool tune(double score);
  void next_joint();
  int next_phase(int from) const;
  std::vector<double> joint_point(const tuned_params& p) const;
  std::string describe_knobs(bool hierarchical_tunable);
  void log(const tuned_params& p, double score, bool best);

  autotune_settings s_;
  // What is tuned: the fusion threshold and the cycle time (the joint
  // search's variables), the hierarchical switches.
  bool fusion_free_;
  bool cycle_free_;
  bool allreduce_free_;
  bool allgather_free_;
  std::string knobs_;
  // The fixed knobs, as the log's last column.
  std::string fixed_column_;
  tuned_params current_;
  tuned_params best_;
  double best_score_ = -1;
  int warmup_left_;
  // The joint phase: test points, then the optimiser's.
  std::vector<std::pair<double, double>> test_points_; // (MiB, ms)
  int joint_iteration_ = 0;
  bayesian_optimization bayes_;
  // 0: joint (with nothing joint to tune: the start's score only), 1:
  // hierarchical allreduce, 2: allgather, 3: done.
  int phase_ = 0;
  // The sample being measured.
  static constexpr int samples_per_score = 5;
  std::vector<double> scores_;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point sample_start_{};
  bool started_ = false;
  std::unordered_map<std::string, int> seen_;
  std::ofstream file_;
};

} // namespace hvactor::collectives
