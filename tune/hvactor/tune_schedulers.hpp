#pragma once

// hvactor::tune's trial schedulers (Ray's FIFOScheduler,
// AsyncHyperBandScheduler, PopulationBasedTraining); see <hvactor/tune.hpp>.

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "hvactor/tune_search.hpp"

namespace hvactor::tune {

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
  /// restart_trial: the result that came with that checkpoint; it becomes
  /// the restarted trial's latest result (its weights are the donor's).
  tune::metrics checkpoint_result;
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
    tune::metrics result;
    tune::config config;
    bool done = false;
  };
  std::pair<std::vector<std::string>, std::vector<std::string>> quantiles() const;
  options o_;
  std::map<std::string, member> members_;
  std::mt19937_64 gen_;
  int num_perturbations_ = 0;
};

} // namespace hvactor::tune
