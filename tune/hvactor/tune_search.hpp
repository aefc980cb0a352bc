#pragma once

// hvactor::tune's search spaces and search algorithms (Ray's tune.uniform,
// tune.grid_search, BasicVariantGenerator, BayesOptSearch); see
// <hvactor/tune.hpp>.

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
  /// Bounds: [lower, upper) for randint (exactly: int_lower()/int_upper()),
  /// [lower, upper] otherwise.
  double lower() const noexcept {
    return lower_;
  }
  double upper() const noexcept {
    return upper_;
  }
  int64_t int_lower() const noexcept {
    return ilower_;
  }
  int64_t int_upper() const noexcept {
    return iupper_;
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
  int64_t ilower_ = 0, iupper_ = 1; // randint's, exactly
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

} // namespace hvactor::tune
