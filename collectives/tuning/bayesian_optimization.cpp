#include "collectives/tuning/bayesian_optimization.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

#include <Eigen/Cholesky>
#include <Eigen/Core>

namespace hvactor::collectives {

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

double squared_distance(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (a[i] - b[i]) * (a[i] - b[i]);
  return d;
}

// The length scales the fit chooses from (the unit cube's).
constexpr double length_scales[] = {0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.2};

} // namespace

struct bayesian_optimization::model {
  double length = 0.3;
  std::vector<std::vector<double>> xs;
  Eigen::LLT<MatrixXd> llt;
  VectorXd alpha; // K^-1 y
  double best_mean = 0;

  double kernel(const std::vector<double>& a, const std::vector<double>& b) const {
    return std::exp(-squared_distance(a, b) / (2 * length * length));
  }

  VectorXd k_star(const std::vector<double>& u) const {
    VectorXd k(static_cast<Eigen::Index>(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i)
      k[static_cast<Eigen::Index>(i)] = kernel(xs[i], u);
    return k;
  }

  std::pair<double, double> predict(const std::vector<double>& u) const {
    auto k = k_star(u);
    double mean = k.dot(alpha);
    VectorXd v = llt.matrixL().solve(k);
    double var = std::max(1.0 - v.squaredNorm(), 1e-12);
    return {mean, std::sqrt(var)};
  }
};

bayesian_optimization::bayesian_optimization(std::vector<std::pair<double, double>> bounds,
                                             double noise, uint64_t seed, double xi)
  : bounds_(std::move(bounds)), noise_(std::max(noise, 1e-3)), xi_(xi), gen_(seed) {
}

void bayesian_optimization::add_sample(const std::vector<double>& x, double y) {
  xs_.push_back(to_unit(x));
  ys_.push_back(y);
}

void bayesian_optimization::clear() {
  xs_.clear();
  ys_.clear();
  model_.reset();
}

std::vector<double> bayesian_optimization::to_unit(const std::vector<double>& x) const {
  std::vector<double> u(bounds_.size());
  for (size_t i = 0; i < u.size(); ++i) {
    auto [lo, hi] = bounds_[i];
    u[i] = hi > lo ? std::clamp((x[i] - lo) / (hi - lo), 0.0, 1.0) : 0.0;
  }
  return u;
}

std::vector<double> bayesian_optimization::from_unit(const std::vector<double>& u) const {
  std::vector<double> x(bounds_.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = bounds_[i].first + u[i] * (bounds_[i].second - bounds_[i].first);
  return x;
}

// Normalises the scores (mean 0, spread 1 from 3 samples on, as Horovod),
// then keeps the length scale under which they are most likely.
void bayesian_optimization::fit() {
  auto n = static_cast<Eigen::Index>(ys_.size());
  VectorXd y(n);
  double mu = 0, sigma = 1;
  if (ys_.size() >= 3) {
    mu = std::accumulate(ys_.begin(), ys_.end(), 0.0) / static_cast<double>(n);
    double sq = 0;
    for (double v : ys_)
      sq += (v - mu) * (v - mu);
    sigma = std::sqrt(sq / static_cast<double>(n));
    if (sigma <= 0)
      sigma = 1;
  }
  for (Eigen::Index i = 0; i < n; ++i)
    y[i] = (ys_[static_cast<size_t>(i)] - mu) / sigma;
  double best_likelihood = -std::numeric_limits<double>::infinity();
  for (double l : length_scales) {
    auto m = std::make_shared<model>();
    m->length = l;
    m->xs = xs_;
    MatrixXd k(n, n);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j)
        k(i, j) = m->kernel(xs_[static_cast<size_t>(i)], xs_[static_cast<size_t>(j)])
                  + (i == j ? noise_ * noise_ : 0.0);
    m->llt.compute(k);
    if (m->llt.info() != Eigen::Success)
      continue;
    m->alpha = m->llt.solve(y);
    double log_det = 0;
    for (Eigen::Index i = 0; i < n; ++i)
      log_det += std::log(m->llt.matrixL()(i, i));
    double likelihood = -0.5 * y.dot(m->alpha) - log_det;
    if (likelihood > best_likelihood) {
      best_likelihood = likelihood;
      model_ = m;
    }
  }
  // The best predicted mean at a sample, not the best score: the samples
  // are noisy (Horovod's choice, after Brochu et al.).
  model_->best_mean = -std::numeric_limits<double>::infinity();
  for (auto& u : xs_)
    model_->best_mean = std::max(model_->best_mean, model_->predict(u).first);
}

double bayesian_optimization::expected_improvement(const std::vector<double>& u) const {
  auto [mean, sd] = model_->predict(u);
  double imp = mean - model_->best_mean - xi_;
  double z = imp / sd;
  double cdf = 0.5 * std::erfc(-z / std::numbers::sqrt2);
  double pdf = std::exp(-z * z / 2) / std::sqrt(2 * std::numbers::pi);
  return imp * cdf + sd * pdf;
}

std::vector<double> bayesian_optimization::next_sample() {
  auto d = bounds_.size();
  if (ys_.empty())
    return from_unit(std::vector<double>(d, 0.5));
  fit();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> best(d), u(d);
  double best_ei = -1;
  for (int c = 0; c < 2000; ++c) {
    for (auto& v : u)
      v = unit(gen_);
    if (double ei = expected_improvement(u); ei > best_ei) {
      best_ei = ei;
      best = u;
    }
  }
  // A pattern search around the best candidate, halving its step.
  for (double step = 0.05; step > 1e-3; step /= 2) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (size_t i = 0; i < d; ++i)
        for (double sign : {-1.0, 1.0}) {
          auto trial = best;
          trial[i] = std::clamp(trial[i] + sign * step, 0.0, 1.0);
          if (double ei = expected_improvement(trial); ei > best_ei + 1e-12) {
            best_ei = ei;
            best = trial;
            moved = true;
          }
        }
    }
  }
  return from_unit(best);
}

std::pair<double, double> bayesian_optimization::predict(const std::vector<double>& x) const {
  if (!model_)
    return {0.0, 1.0};
  return model_->predict(to_unit(x));
}

} // namespace hvactor::collectives
