#include "collectives/internal/autotune.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/internal/log.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

constexpr double mib = 1024.0 * 1024.0;
// Horovod's bounds of the joint space: fusion threshold (MiB), cycle time (ms).
constexpr std::pair<double, double> fusion_bounds{0.0, 64.0};
constexpr std::pair<double, double> cycle_bounds{1.0, 100.0};

double fusion_mib(const tuned_params& p) {
  return static_cast<double>(p.fusion_threshold) / mib;
}

double cycle_ms(const tuned_params& p) {
  return static_cast<double>(p.cycle_time_us) / 1000.0;
}

} // namespace

parameter_manager::parameter_manager(const autotune_settings& s, const tuned_params& start,
                                     bool hierarchical_tunable)
  : s_(s),
    hierarchical_tunable_(hierarchical_tunable),
    current_(start),
    best_(start),
    warmup_left_(std::max(0, s.warmup_samples)),
    bayes_({fusion_bounds, cycle_bounds}, s.gaussian_process_noise) {
  s_.steps_per_sample = std::max(1, s_.steps_per_sample);
  current_.active = best_.active = true;
  // The values in force first (a mistuned start is scored, not skipped),
  // then Horovod's test points.
  test_points_ = {{std::clamp(fusion_mib(start), fusion_bounds.first, fusion_bounds.second),
                   std::clamp(cycle_ms(start), cycle_bounds.first, cycle_bounds.second)},
                  {4, 5},
                  {32, 50},
                  {16, 25},
                  {8, 10}};
  if (!s_.log_file.empty()) {
    // As Horovod: a log that cannot be written is not an error (the
    // job tunes all the same); it is said once.
    file_.open(s_.log_file, std::ios::out | std::ios::trunc);
    if (!file_)
      log::warn("Autotuner: HOROVOD_AUTOTUNE_LOG={} cannot be written; tuning without a log",
                s_.log_file);
  }
  if (file_) {
    file_ << "hierarchical_allreduce,hierarchical_allgather,cycle_time_ms,tensor_fusion_threshold,"
             "score\n"
          << std::flush;
  }
  log::info("Autotuner: Tunable params [hierarchical_allreduce,hierarchical_allgather,"
            "cycle_time_ms,tensor_fusion_threshold] score (bytes/us); hierarchical switches {}",
            hierarchical_tunable ? "tuned" : "fixed (no hierarchical path in this job)");
}

std::string parameter_manager::describe(const tuned_params& p) {
  return fmt::format("[{}, {}, {:.3g} ms, {:.3g} mb]", p.hierarchical_allreduce,
                     p.hierarchical_allgather, cycle_ms(p), fusion_mib(p));
}

void parameter_manager::log(const tuned_params& p, double score, bool best) {
  log::info("Autotuner: {}{} {:.4g}", best ? "Best params " : "", describe(p), score);
  if (file_)
    file_ << p.hierarchical_allreduce << "," << p.hierarchical_allgather << "," << cycle_ms(p)
          << "," << fusion_mib(p) << "," << score << std::endl;
}

bool parameter_manager::observe(const std::string& key, int64_t bytes,
                                std::chrono::steady_clock::time_point now) {
  if (!current_.active)
    return false;
  if (!started_) {
    started_ = true;
    sample_start_ = now;
  }
  int step = seen_[key]++;
  if (step >= (static_cast<int>(scores_.size()) + 1) * s_.steps_per_sample) {
    auto us = std::chrono::duration<double, std::micro>(now - sample_start_).count();
    scores_.push_back(static_cast<double>(bytes_) / std::max(us, 1.0));
    bytes_ = 0;
    sample_start_ = now;
  }
  bytes_ += bytes;
  if (static_cast<int>(scores_.size()) < samples_per_score)
    return false;
  std::sort(scores_.begin(), scores_.end());
  double median = scores_[samples_per_score / 2];
  scores_.clear();
  seen_.clear();
  bytes_ = 0;
  sample_start_ = now;
  return tune(median);
}

void parameter_manager::next_joint() {
  std::pair<double, double> point;
  if (joint_iteration_ < static_cast<int>(test_points_.size())) {
    point = test_points_[static_cast<size_t>(joint_iteration_)];
  } else {
    auto x = bayes_.next_sample();
    point = {x[0], x[1]};
  }
  current_.fusion_threshold = std::llround(point.first * mib);
  current_.cycle_time_us = std::llround(point.second * 1000.0);
}

bool parameter_manager::tune(double score) {
  if (warmup_left_ > 0) {
    --warmup_left_;
    log::info("Autotuner: Warming up ({} remaining)", warmup_left_);
    return false;
  }
  log(current_, score, false);
  if (score > best_score_) {
    best_score_ = score;
    best_ = current_;
  }
  if (phase_ == 0) {
    bayes_.add_sample({fusion_mib(current_), cycle_ms(current_)}, score);
    if (++joint_iteration_ <= std::max(0, s_.bayes_opt_max_samples)) {
      next_joint();
      return true;
    }
    phase_ = hierarchical_tunable_ ? 1 : 3;
    if (phase_ == 1) {
      current_ = best_;
      current_.hierarchical_allreduce = !best_.hierarchical_allreduce;
      return true;
    }
  } else if (phase_ == 1) {
    phase_ = 2;
    current_ = best_;
    current_.hierarchical_allgather = !best_.hierarchical_allgather;
    return true;
  } else {
    phase_ = 3;
  }
  current_ = best_;
  current_.active = false;
  log(current_, best_score_, true);
  return true;
}

} // namespace hvactor::collectives
