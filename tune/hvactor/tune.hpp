#pragma once

// hvactor::tune: Ray Tune over hvactor::train (API.md "Tune"). A tuner
// runs many trials, each an hvactor::train fit of its own worker group
// with a config drawn from a search space, packs them onto the cluster as
// their gangs fit, lets a scheduler stop the bad ones early (ASHA) or
// copy the good ones (PBT), and keeps everything in an experiment
// directory that tuner::restore() resumes after a driver crash.
//
//   auto factory = hvactor::tune::trainer_factory{loop, {.scaling = {.num_workers = 2}}};
//   hvactor::tune::tuner t{rt, factory, {
//       .param_space = {{"lr", hvactor::tune::loguniform(1e-4, 1e-1)}},
//       .tune_config = {.metric = "loss", .mode = "min", .num_samples = 16,
//                       .scheduler = std::make_shared<hvactor::tune::asha_scheduler>()}}};
//   auto grid = t.fit();
//   auto best = grid.get_best_result();

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "hvactor/train.hpp"
#include "hvactor/tune_schedulers.hpp"
#include "hvactor/tune_search.hpp"

namespace hvactor::tune {

// -- the tuner ---------------------------------------------------------------------

/// Makes each trial's trainer: the loop every trial runs, and its
/// trainer_options from the trial's config (which becomes `.config`;
/// run.name, storage_path, verbose and failure are the tuner's).
class trainer_factory {
public:
  using options_fn = std::function<train::trainer_options(const config&)>;

  template <class F>
  trainer_factory(F loop, train::trainer_options base = {})
      : loop_(hvactor::detail::to_pointer(loop)),
        options_([base](const config&) { return base; }) {
  }
  template <class F>
  trainer_factory(F loop, options_fn options)
      : loop_(hvactor::detail::to_pointer(loop)), options_(std::move(options)) {
  }

  /// The trial's options: options(cfg) with `.config = cfg`.
  train::trainer_options options_for(const config& cfg) const;
  train::trainer make(runtime& rt, const config& cfg) const;
  train::trainer::loop_fn loop() const noexcept {
    return loop_;
  }

private:
  train::trainer::loop_fn loop_;
  options_fn options_;
};

/// Ray's TuneConfig.
struct tune_config {
  /// The metric and mode ("min" or "max") the scheduler, the searcher and
  /// get_best_result() use by default; both or neither.
  std::string metric;
  std::string mode;
  /// Samples of the space (times the grid for the default searcher);
  /// -1: until the searcher ends (not with the default searcher).
  int64_t num_samples = 1;
  /// Trials running at once; 0: as many as the cluster fits.
  int max_concurrent_trials = 0;
  /// Default: basic_variant_generator.
  std::shared_ptr<tune::search_alg> search_alg;
  /// Default: fifo_scheduler.
  std::shared_ptr<tune::scheduler> scheduler;
  /// Seeds the searcher's and schedulers' draws; 0: from the clock.
  uint64_t seed = 0;
};

/// Ray's RunConfig for an experiment.
struct run_config {
  /// The experiment's directory under storage_path; default
  /// "hvactor_tune_<date>_<time>".
  std::string name;
  /// Default $HOME/hvactor_results.
  std::string storage_path;
  /// Each trial's restarts after a failed worker group (its last
  /// checkpoint); -1: no limit.
  train::failure_config failure;
  train::checkpoint_config checkpoint;
  /// 0: silent; 1: the progress table every `progress_interval_s` and at
  /// the end; 2: also every trial's status changes.
  int verbose = 1;
  double progress_interval_s = 5;
};

struct tuner_options {
  tune::param_space param_space;
  tune::tune_config tune_config;
  tune::run_config run;
};

/// One trial's outcome (Ray's Result, with its config).
struct result {
  std::string trial_id;
  tune::config config;
  trial_status status = trial_status::pending;
  /// The trial's last result: the reported metrics plus training_iteration,
  /// time_total_s, time_this_iter_s, trial_id and done.
  tune::metrics metrics;
  std::vector<tune::metrics> metrics_history;
  train::checkpoint checkpoint;
  /// The trial's directory.
  std::string path;
  /// Why it failed; empty unless status is error.
  std::string error;
  /// Stopped early by the scheduler.
  bool stopped_early = false;
  /// When each of its fits ran (Unix seconds: start, end); a PBT exploit or
  /// a restore starts another.
  std::vector<std::pair<double, double>> fit_spans;
};

/// Ray's ResultGrid: every trial's result, in creation order.
class result_grid {
public:
  size_t size() const noexcept {
    return results_.size();
  }
  const result& operator[](size_t i) const {
    return results_.at(i);
  }
  auto begin() const noexcept {
    return results_.begin();
  }
  auto end() const noexcept {
    return results_.end();
  }
  /// The best trial by `metric` and `mode` (default: the tune_config's);
  /// scope "last" compares each trial's last result, "all" every result.
  /// std::invalid_argument without a metric or mode, for a mode other
  /// than min/max, or when no trial reported the metric (naming it and
  /// the metrics there are).
  const result& get_best_result(std::string metric = {}, std::string mode = {},
                                const std::string& scope = "last") const;
  /// Trials that failed.
  size_t num_errors() const;
  size_t num_terminated() const;
  std::vector<std::string> errors() const;
  /// The experiment's directory.
  const std::string& path() const noexcept {
    return path_;
  }
  /// A fixed-width table: trial, status, config columns, iterations, the
  /// metric (Ray's get_dataframe() as text).
  std::string table() const;

private:
  friend class tuner;
  std::vector<result> results_;
  std::string metric_, mode_, path_;
};

std::ostream& operator<<(std::ostream& out, const result_grid& g);

/// Ray's Tuner.
class tuner {
public:
  /// Validates (std::invalid_argument) before anything starts: an empty
  /// param_space, num_samples 0 or below -1, metric without mode or mode
  /// other than min/max, a domain or grid that cannot be drawn from, a
  /// scheduler that needs a metric without one, max_concurrent_trials < 0.
  tuner(runtime& rt, trainer_factory factory, tuner_options opts);
  ~tuner();
  tuner(const tuner&) = delete;
  tuner& operator=(const tuner&) = delete;

  /// Runs the experiment until every trial ended; trial failures are in
  /// the grid (errors()), not thrown. Throws std::invalid_argument when
  /// the experiment's metric was never reported by any trial, and
  /// hvactor::error when the experiment directory cannot be written or a
  /// trial's gang can never fit the cluster.
  result_grid fit();

  /// Ray's Tuner.restore: the experiment in `path` (its
  /// experiment_state.json) with its original space and configs; fit()
  /// keeps its finished trials and resumes the others from their latest
  /// checkpoints. `opts` supplies the searcher and scheduler objects
  /// (they are not saved); its param_space and run name are ignored.
  static tuner restore(const std::string& path, runtime& rt, trainer_factory factory,
                       tuner_options opts = {});
  /// Whether `path` holds an experiment that restore() can resume.
  static bool can_restore(const std::string& path);

  tuner(tuner&&) noexcept;

private:
  struct impl;
  explicit tuner(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::tune
