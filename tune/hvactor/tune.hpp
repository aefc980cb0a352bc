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

#include <cstdint>
#include <exception>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "hvactor/train.hpp"

namespace hvactor::tune {

using train::config;
using train::metrics;
using train::value;

// -- search spaces -----------------------------------------------------------------

/// A distribution a trial's value is drawn from (Ray's tune.uniform, ...).
class domain {
public:
  enum class kind { uniform, quniform, loguniform, randint, choice };

  kind type() const noexcept {
    return kind_;
  }
  /// Bounds: [lower, upper) for randint, [lower, upper] otherwise.
  double lower() const noexcept {
    return lower_;
  }
  double upper() const noexcept {
    return upper_;
  }
  /// quniform's step; loguniform's base.
  double q() const noexcept {
    return q_;
  }
  double base() const noexcept {
    return q_;
  }
  const std::vector<value>& categories() const noexcept {
    return categories_;
  }
  /// True for the numeric domains (all but choice).
  bool numeric() const noexcept {
    return kind_ != kind::choice;
  }

  /// One draw.
  value sample(std::mt19937_64& gen) const;
  /// Whether `v` lies in the domain (a choice: one of its categories).
  bool contains(const value& v) const;
  /// "uniform(0.1, 1)" as shown in errors and the progress table.
  std::string to_string() const;

private:
  friend domain uniform(double, double);
  friend domain quniform(double, double, double);
  friend domain loguniform(double, double, double);
  friend domain randint(int64_t, int64_t);
  friend domain choice(std::vector<value>);
  kind kind_ = kind::uniform;
  double lower_ = 0, upper_ = 1, q_ = 0;
  std::vector<value> categories_;
};

/// Uniform in [lower, upper]; std::invalid_argument unless lower < upper
/// (both finite).
domain uniform(double lower, double upper);
/// uniform, rounded to a multiple of q (Ray: round(x / q) * q), within
/// the bounds; q > 0.
domain quniform(double lower, double upper, double q);
/// Uniform in log space between lower > 0 and upper.
domain loguniform(double lower, double upper, double base = 10);
/// An integer in [lower, upper) (Ray's tune.randint: upper exclusive).
domain randint(int64_t lower, int64_t upper);
/// One of `categories` (at least one), each equally likely.
domain choice(std::vector<value> categories);

class param;
/// A search space: name -> constant, domain, grid or nested space. A
/// trial's config flattens nested names with '/' ("model/layers").
using param_space = std::map<std::string, param>;

/// Every value of a grid_search entry, crossed with the other grids.
struct grid {
  std::vector<value> values;
};
/// Ray's tune.grid_search: every value, in order, in every sample.
grid grid_search(std::vector<value> values);

/// One entry of a param_space.
class param {
public:
  template <class T>
    requires std::is_constructible_v<value, T>
  param(T x) : v_(value(std::move(x))) {
  }
  param(domain d) : v_(std::move(d)) {
  }
  param(grid g) : v_(std::move(g)) {
  }
  param(param_space nested);

  const std::variant<value, domain, grid, std::shared_ptr<const param_space>>& get() const noexcept {
    return v_;
  }

private:
  std::variant<value, domain, grid, std::shared_ptr<const param_space>> v_;
};

// -- results -----------------------------------------------------------------------

/// A trial's state (Ray's Trial.status).
enum class trial_status { pending, running, terminated, error };
/// "PENDING", "RUNNING", "TERMINATED", "ERROR".
const char* to_string(trial_status s) noexcept;

/// What a search algorithm and a scheduler know of a trial.
struct trial_info {
  /// "trial_00000", ... in the order trials were created.
  std::string trial_id;
  tune::config config;
  trial_status status = trial_status::pending;
  /// The latest persisted checkpoint (a directory); empty if none.
  train::checkpoint checkpoint;
  /// The trial's last result (the one being decided on, in on_result).
  tune::metrics last_result;
  /// Workers and CPUs per worker of its gang.
  int num_workers = 1;
  int cpus_per_worker = 1;
};

// -- search algorithms -------------------------------------------------------------

/// Ray's Searcher: where trial configs come from.
class search_alg {
public:
  virtual ~search_alg() = default;
  /// The experiment's metric ("" when none), mode ("min", "max" or ""),
  /// space and seed, before the first suggest(). Throws
  /// std::invalid_argument for a space it cannot search.
  virtual void set_search_properties(const std::string& metric, const std::string& mode,
                                     const param_space& space, uint64_t seed) = 0;
  /// The trials it will create for `num_samples` (-1: no end of its own,
  /// the tuner stops at num_samples).
  virtual int64_t total_trials(int64_t num_samples) const {
    return num_samples;
  }
  /// The next trial's config; nullopt when it has none (now or ever).
  virtual std::optional<config> suggest(const std::string& trial_id) = 0;
  virtual void on_trial_result(const std::string& trial_id, const metrics& result) {
    (void)trial_id, (void)result;
  }
  /// A trial ended: its last result, or an error (result empty).
  virtual void on_trial_complete(const std::string& trial_id, const metrics& result, bool error) {
    (void)trial_id, (void)result, (void)error;
  }
  /// tuner::restore: a trial created before the crash, in creation order
  /// (before any new suggest()). The default suggests one and drops it, so
  /// that a seeded generator goes on where it was.
  virtual void on_restored_trial(const std::string& trial_id, const config& cfg) {
    (void)cfg;
    (void)suggest(trial_id);
  }
};

/// Ray's BasicVariantGenerator: grid_search entries crossed, the other
/// domains drawn at random; num_samples times the grid.
class basic_variant_generator : public search_alg {
public:
  void set_search_properties(const std::string& metric, const std::string& mode,
                             const param_space& space, uint64_t seed) override;
  int64_t total_trials(int64_t num_samples) const override;
  std::optional<config> suggest(const std::string& trial_id) override;
  /// Grid points, for total_trials.
  int64_t grid_size() const noexcept {
    return grid_size_;
  }
  void set_num_samples(int64_t n) {
    num_samples_ = n;
  }

private:
  param_space space_;
  std::mt19937_64 gen_;
  int64_t grid_size_ = 1, num_samples_ = 1, made_ = 0;
};

/// Bayesian optimisation (Ray's BayesOptSearch) on the autotune's
/// Gaussian process: `random_search_steps` random configs first, then the
/// config with the highest expected improvement given the finished
/// trials' last `metric`. Numeric domains only (uniform, quniform,
/// loguniform in log space, randint); constants pass through.
class bayesopt_search : public search_alg {
public:
  struct options {
    int random_search_steps = 4;
    /// Exploration of the expected improvement (Ray's xi).
    double xi = 0.01;
    /// The observations' noise relative to their spread.
    double noise = 0.1;
  };
  bayesopt_search() : bayesopt_search(options{}) {
  }
  explicit bayesopt_search(options o);
  ~bayesopt_search() override;
  void set_search_properties(const std::string& metric, const std::string& mode,
                             const param_space& space, uint64_t seed) override;
  std::optional<config> suggest(const std::string& trial_id) override;
  void on_trial_complete(const std::string& trial_id, const metrics& result, bool error) override;
  void on_restored_trial(const std::string& trial_id, const config& cfg) override;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// -- schedulers --------------------------------------------------------------------

/// A scheduler's verdict on a result (Ray's TrialScheduler.CONTINUE/STOP;
/// PBT's exploit restarts the trial with a new config from a checkpoint).
struct decision {
  enum kind_t { continue_trial, stop_trial, restart_trial };
  kind_t kind = continue_trial;
  /// restart_trial: the trial's new config and the checkpoint it resumes from.
  tune::config config;
  train::checkpoint checkpoint;
  /// restart_trial: the training_iteration and time_total_s of that checkpoint.
  int64_t iteration = 0;
  double time_total_s = 0;
  /// stop_trial: false when the trial used its whole budget (ASHA's max_t):
  /// result.stopped_early stays false.
  bool early = true;

  static decision go_on() {
    return {};
  }
  static decision stop() {
    return {stop_trial};
  }
};

/// Ray's TrialScheduler. The tuner calls it under its lock, in order.
class scheduler {
public:
  virtual ~scheduler() = default;
  /// The experiment's metric and mode (set_search_properties); throws
  /// std::invalid_argument when it needs them and they are missing.
  virtual void set_search_properties(const std::string& metric, const std::string& mode);
  virtual void on_trial_add(const trial_info& t) {
    (void)t;
  }
  /// Every result of a running trial; `result` holds training_iteration
  /// and time_total_s counted over the trial's life.
  virtual decision on_trial_result(const trial_info& t, const metrics& result) = 0;
  /// A trial finished its loop (or was stopped by this scheduler).
  virtual void on_trial_complete(const trial_info& t, const metrics& result) {
    (void)t, (void)result;
  }
  /// A trial failed for good.
  virtual void on_trial_error(const trial_info& t) {
    (void)t;
  }
  /// One line for the progress table ("Using FIFO scheduling algorithm.").
  virtual std::string debug_string() const = 0;

protected:
  std::string metric_, mode_;
  /// result[metric] with mode applied (larger is better); nullopt when
  /// the result lacks it or it is not a number.
  std::optional<double> score(const metrics& result) const;
};

/// Ray's FIFOScheduler: every trial runs to the end.
class fifo_scheduler : public scheduler {
public:
  decision on_trial_result(const trial_info&, const metrics&) override {
    return decision::go_on();
  }
  std::string debug_string() const override {
    return "Using FIFO scheduling algorithm.";
  }
};

/// Ray's AsyncHyperBandScheduler (ASHA). A trial that reaches a rung
/// (grace_period * reduction_factor^k of time_attr) with a score below
/// the rung's (1 - 1/reduction_factor) quantile of the scores recorded
/// there is stopped; at max_t every trial stops.
class asha_scheduler : public scheduler {
public:
  struct options {
    std::string time_attr = "training_iteration";
    /// Default: the tune_config's.
    std::string metric;
    std::string mode;
    double max_t = 100;
    double grace_period = 1;
    double reduction_factor = 4;
    int brackets = 1;
    uint64_t seed = 0;
  };
  asha_scheduler() : asha_scheduler(options{}) {
  }
  /// std::invalid_argument: grace_period > 0, max_t >= grace_period,
  /// reduction_factor > 1, brackets >= 1.
  explicit asha_scheduler(options o);
  void set_search_properties(const std::string& metric, const std::string& mode) override;
  void on_trial_add(const trial_info& t) override;
  decision on_trial_result(const trial_info& t, const metrics& result) override;
  std::string debug_string() const override;

  /// Each bracket's rungs: milestone -> recorded scores (larger is better).
  struct rung {
    double milestone;
    std::map<std::string, double> recorded;
  };
  const std::vector<std::vector<rung>>& brackets() const noexcept {
    return brackets_;
  }
  int num_stopped() const noexcept {
    return num_stopped_;
  }

private:
  options o_;
  std::vector<std::vector<rung>> brackets_;
  std::map<std::string, size_t> bracket_of_;
  std::mt19937_64 gen_;
  int num_stopped_ = 0;
};

/// Ray's PopulationBasedTraining. Every perturbation_interval of
/// time_attr, a trial in the bottom quantile_fraction restarts from the
/// latest checkpoint of a random trial of the top quantile (exploit) with
/// that trial's config perturbed (explore): each hyperparam_mutations
/// entry is resampled with resample_probability, else multiplied by one
/// of perturbation_factors (numbers) or moved to a neighbouring value
/// (lists).
class pbt_scheduler : public scheduler {
public:
  struct options {
    std::string time_attr = "time_total_s";
    std::string metric;
    std::string mode;
    double perturbation_interval = 60;
    /// name -> domain (resampled, or perturbed) or a list of values.
    std::map<std::string, std::variant<domain, std::vector<value>>> hyperparam_mutations;
    double quantile_fraction = 0.25;
    double resample_probability = 0.25;
    std::pair<double, double> perturbation_factors{1.2, 0.8};
    uint64_t seed = 0;
  };
  /// std::invalid_argument: perturbation_interval > 0, mutations given,
  /// quantile_fraction in [0, 0.5], resample_probability in [0, 1].
  explicit pbt_scheduler(options o);
  void set_search_properties(const std::string& metric, const std::string& mode) override;
  decision on_trial_result(const trial_info& t, const metrics& result) override;
  void on_trial_complete(const trial_info& t, const metrics& result) override;
  void on_trial_error(const trial_info& t) override;
  std::string debug_string() const override;

  /// The config explore() makes of `cfg` (for tests).
  config explore(const config& cfg);
  int num_perturbations() const noexcept {
    return num_perturbations_;
  }

private:
  struct member {
    std::optional<double> score;
    double last_perturbation = 0;
    train::checkpoint checkpoint;
    int64_t iteration = 0;
    double time_total_s = 0;
    tune::config config;
    bool done = false;
  };
  std::pair<std::vector<std::string>, std::vector<std::string>> quantiles() const;
  options o_;
  std::map<std::string, member> members_;
  std::mt19937_64 gen_;
  int num_perturbations_ = 0;
};

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
