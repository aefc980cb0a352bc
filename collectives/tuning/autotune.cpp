#include "collectives/tuning/autotune.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/internal/env_names.hpp"
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

// The joint search's bounds, of its free variables only.
std::vector<std::pair<double, double>> free_bounds(bool fusion, bool cycle) {
  std::vector<std::pair<double, double>> out;
  if (fusion)
    out.push_back(fusion_bounds);
  if (cycle)
    out.push_back(cycle_bounds);
  return out;
}

} // namespace

parameter_manager::parameter_manager(const autotune_settings& s, const tuned_params& start,
                                     bool hierarchical_tunable)
  : s_(s),
    fusion_free_(!s.fusion_threshold_set || s.start_from_set),
    cycle_free_(!s.cycle_time_set || s.start_from_set),
    allreduce_free_(hierarchical_tunable && (!s.hierarchical_allreduce_set || s.start_from_set)),
    allgather_free_(hierarchical_tunable && (!s.hierarchical_allgather_set || s.start_from_set)),
    current_(start),
    best_(start),
    warmup_left_(std::max(0, s.warmup_samples)),
    bayes_(free_bounds(fusion_free_, cycle_free_), s.gaussian_process_noise) {
  s_.steps_per_sample = std::max(1, s_.steps_per_sample);
  // The values in force first (a mistuned start is scored, not skipped),
  // then Horovod's test points; a fixed variable keeps its value in each.
  test_points_ = {{std::clamp(fusion_mib(start), fusion_bounds.first, fusion_bounds.second),
                   std::clamp(cycle_ms(start), cycle_bounds.first, cycle_bounds.second)},
                  {4, 5},
                  {32, 50},
                  {16, 25},
                  {8, 10}};
  knobs_ = describe_knobs(hierarchical_tunable);
  bool anything = fusion_free_ || cycle_free_ || allreduce_free_ || allgather_free_;
  current_.active = best_.active = anything;
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
             "score,fixed\n"
          << std::flush;
  }
  log::info("Autotuner: Tunable params [hierarchical_allreduce,hierarchical_allgather,"
            "cycle_time_ms,tensor_fusion_threshold] score (bytes/us); {}",
            knobs_);
  if (!anything)
    log::info("Autotuner: nothing to tune; the values stay {}", describe(current_));
}

// Sets fixed_column_ too: the fixed knobs' names, ';'-separated.
std::string parameter_manager::describe_knobs(bool hierarchical_tunable) {
  std::vector<std::string> tuned, fixed, column;
  auto add = [&](bool free, const char* name, std::string value, std::string why) {
    if (free) {
      tuned.push_back(name);
      return;
    }
    fixed.push_back(fmt::format("{} = {} ({})", name, value, why));
    column.push_back(name);
  };
  auto set_by = [](const char* variable) { return fmt::format("set by {}", variable); };
  auto switch_why = [&](const char* variable) {
    return hierarchical_tunable ? set_by(variable) : std::string{"no hierarchical path here"};
  };
  add(allreduce_free_, "hierarchical_allreduce", fmt::format("{}", current_.hierarchical_allreduce),
      switch_why(env::hierarchical_allreduce));
  add(allgather_free_, "hierarchical_allgather", fmt::format("{}", current_.hierarchical_allgather),
      switch_why(env::hierarchical_allgather));
  add(cycle_free_, "cycle_time_ms", fmt::format("{:.3g} ms", cycle_ms(current_)),
      set_by(env::cycle_time));
  add(fusion_free_, "tensor_fusion_threshold", fmt::format("{:.3g} mb", fusion_mib(current_)),
      set_by(env::fusion_threshold));
  add(false, "cache_capacity", "as set", "hvactor does not tune the response cache");
  auto list = [](const std::vector<std::string>& v) {
    return v.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(v, ", "));
  };
  fixed_column_ = fmt::format("{}", fmt::join(column, ";"));
  return fmt::format("tuned: {}; fixed: {}", list(tuned), list(fixed));
}

std::string parameter_manager::describe(const tuned_params& p) {
  return fmt::format("[{}, {}, {:.3g} ms, {:.3g} mb]", p.hierarchical_allreduce,
                     p.hierarchical_allgather, cycle_ms(p), fusion_mib(p));
}

void parameter_manager::log(const tuned_params& p, double score, bool best) {
  log::info("Autotuner: {}{} {:.4g}", best ? "Best params " : "", describe(p), score);
  if (file_)
    file_ << p.hierarchical_allreduce << "," << p.hierarchical_allgather << "," << cycle_ms(p)
          << "," << fusion_mib(p) << "," << score << "," << fixed_column_ << std::endl;
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

// The joint search's free variables of `p`, in the optimiser's order.
std::vector<double> parameter_manager::joint_point(const tuned_params& p) const {
  std::vector<double> x;
  if (fusion_free_)
    x.push_back(fusion_mib(p));
  if (cycle_free_)
    x.push_back(cycle_ms(p));
  return x;
}

void parameter_manager::next_joint() {
  std::pair<double, double> point;
  if (joint_iteration_ < static_cast<int>(test_points_.size())) {
    point = test_points_[static_cast<size_t>(joint_iteration_)];
  } else {
    auto x = bayes_.next_sample();
    size_t k = 0;
    if (fusion_free_)
      point.first = x[k++];
    if (cycle_free_)
      point.second = x[k++];
  }
  if (fusion_free_)
    current_.fusion_threshold = std::llround(point.first * mib);
  if (cycle_free_)
    current_.cycle_time_us = std::llround(point.second * 1000.0);
}

// The first phase from `from` on with something to tune (3: none).
int parameter_manager::next_phase(int from) const {
  if (from <= 1 && allreduce_free_)
    return 1;
  if (from <= 2 && allgather_free_)
    return 2;
  return 3;
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
  if (phase_ == 0 && (fusion_free_ || cycle_free_)) {
    bayes_.add_sample(joint_point(current_), score);
    if (++joint_iteration_ <= std::max(0, s_.bayes_opt_max_samples)) {
      next_joint();
      return true;
    }
  }
  // Each switch tried the other way, with the best values so far.
  phase_ = next_phase(phase_ + 1);
  current_ = best_;
  if (phase_ == 1) {
    current_.hierarchical_allreduce = !best_.hierarchical_allreduce;
    return true;
  }
  if (phase_ == 2) {
    current_.hierarchical_allgather = !best_.hierarchical_allgather;
    return true;
  }
  current_.active = false;
  log(current_, best_score_, true);
  return true;
}

} // namespace hvactor::collectives
