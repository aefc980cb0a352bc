#pragma once

// Internal: the Bayesian optimisation behind autotune (Horovod's
// horovod/common/optim/: a Gaussian process over the scored samples,
// the next sample where the expected improvement is highest).

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace hvactor::collectives {

/// Maximises an unknown, noisy function of a few bounded variables from
/// its samples. The surrogate is a Gaussian process with a squared
/// exponential kernel over the unit cube the bounds map to (one length
/// scale, the one of a small grid that makes the samples most likely),
/// `noise` the standard deviation of a sample's noise relative to the
/// scores' spread (Horovod's HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE);
/// the next sample maximises the expected improvement (exploration `xi`)
/// over random candidates, refined by a shrinking pattern search.
/// Deterministic for a seed. Not thread-safe.
class bayesian_optimization {
public:
  bayesian_optimization(std::vector<std::pair<double, double>> bounds, double noise,
                        uint64_t seed = 1, double xi = 0.01);

  void add_sample(const std::vector<double>& x, double y);

  /// The next point to score (within the bounds); the bounds' centre
  /// before any sample.
  std::vector<double> next_sample();

  void clear();
  size_t samples() const {
    return ys_.size();
  }

  /// The surrogate's mean and standard deviation at `x` (after
  /// next_sample() fitted it): for tests.
  std::pair<double, double> predict(const std::vector<double>& x) const;

private:
  std::vector<double> to_unit(const std::vector<double>& x) const;
  std::vector<double> from_unit(const std::vector<double>& u) const;
  void fit();
  double expected_improvement(const std::vector<double>& u) const;

  std::vector<std::pair<double, double>> bounds_;
  double noise_;
  double xi_;
  std::mt19937_64 gen_;
  std::vector<std::vector<double>> xs_; // unit cube
  std::vector<double> ys_;
  // The fitted surrogate.
  struct model;
  std::shared_ptr<model> model_;
};

} // namespace hvactor::collectives
