// hvactor::tune's Bayesian optimisation (Ray's BayesOptSearch) on the
// autotune's Gaussian process (collectives/tuning/bayesian_optimization):
// random configs first, then the one with the highest expected
// improvement over the finished trials.

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "collectives/tuning/bayesian_optimization.hpp"
#include "tune/internal/space.hpp"

namespace hvactor::tune {

struct bayesopt_search::impl {
  options o;
  std::string metric, mode;
  /// The constants, and the numeric domains the process searches.
  config constants;
  std::vector<std::pair<std::string, domain>> dims;
  std::mt19937_64 gen;
  std::unique_ptr<collectives::bayesian_optimization> gp;
  std::map<std::string, std::vector<double>> points; // trial -> coordinates
  int64_t suggested = 0;

  /// The process's coordinates of a config (loguniform in log space).
  std::vector<double> coordinates(const config& cfg) const {
    std::vector<double> x;
    for (auto& [name, d] : dims) {
      auto i = cfg.find(name);
      auto v = i == cfg.end() || i->second.is_string() ? d.lower() : i->second.as_double();
      x.push_back(d.type() == domain::kind::loguniform ? std::log(v) : v);
    }
    return x;
  }

  config from_coordinates(const std::vector<double>& x) const {
    auto cfg = constants;
    for (size_t i = 0; i < dims.size(); ++i) {
      auto& [name, d] = dims[i];
      switch (d.type()) {
        case domain::kind::loguniform:
          cfg[name] = std::clamp(std::exp(x[i]), d.lower(), d.upper());
          break;
        case domain::kind::quniform:
          cfg[name] = std::clamp(std::round(x[i] / d.q()) * d.q(), d.lower(), d.upper());
          break;
        case domain::kind::randint:
          cfg[name] = std::clamp<int64_t>(static_cast<int64_t>(std::floor(x[i])),
                                          static_cast<int64_t>(d.lower()),
                                          static_cast<int64_t>(d.upper()) - 1);
          break;
        default:
          cfg[name] = std::clamp(x[i], d.lower(), d.upper());
      }
    }
    return cfg;
  }
};

bayesopt_search::bayesopt_search(options o) : impl_(std::make_unique<impl>()) {
  if (o.random_search_steps < 1)
    throw std::invalid_argument(fmt::format(
      "bayesopt_search: random_search_steps must be >= 1: Got {}.", o.random_search_steps));
  if (!(o.noise >= 0) || !(o.xi >= 0))
    throw std::invalid_argument("bayesopt_search: noise and xi must be >= 0");
  impl_->o = o;
}

bayesopt_search::~bayesopt_search() = default;

void bayesopt_search::set_search_properties(const std::string& metric, const std::string& mode,
                                            const param_space& space, uint64_t seed) {
  auto& st = *impl_;
  if (metric.empty() || (mode != "min" && mode != "max"))
    throw std::invalid_argument("bayesopt_search needs a metric and a mode ('min' or 'max'): "
                                "set tune_config.metric and tune_config.mode");
  st.metric = metric;
  st.mode = mode;
  st.constants.clear();
  st.dims.clear();
  std::vector<std::pair<double, double>> bounds;
  for (auto& l : flatten(space)) {
    auto& p = l.p->get();
    if (auto* v = std::get_if<value>(&p)) {
      st.constants[l.path] = *v;
      continue;
    }
    auto* d = std::get_if<domain>(&p);
    if (!d || !d->numeric())
      throw std::invalid_argument(fmt::format(
        "bayesopt_search searches uniform, quniform, loguniform and randint parameters: "
        "'{}' is {}",
        l.path, describe(*l.p)));
    st.dims.emplace_back(l.path, *d);
    if (d->type() == domain::kind::loguniform)
      bounds.emplace_back(std::log(d->lower()), std::log(d->upper()));
    else
      bounds.emplace_back(d->lower(), d->upper());
  }
  if (st.dims.empty())
    throw std::invalid_argument("bayesopt_search: the param_space has no parameter to search");
  st.gen.seed(seed);
  st.gp = std::make_unique<collectives::bayesian_optimization>(bounds, st.o.noise, seed | 1,
                                                               st.o.xi);
  st.points.clear();
  st.suggested = 0;
}

std::optional<config> bayesopt_search::suggest(const std::string& trial_id) {
  auto& st = *impl_;
  if (!st.gp)
    throw std::logic_error("bayesopt_search: suggest() before set_search_properties()");
  config cfg;
  if (st.suggested < st.o.random_search_steps || st.gp->samples() == 0) {
    cfg = st.constants;
    for (auto& [name, d] : st.dims)
      cfg[name] = d.sample(st.gen);
  } else {
    cfg = st.from_coordinates(st.gp->next_sample());
  }
  ++st.suggested;
  st.points[trial_id] = st.coordinates(cfg);
  return cfg;
}

void bayesopt_search::on_trial_complete(const std::string& trial_id, const metrics& result,
                                        bool error) {
  auto& st = *impl_;
  auto p = st.points.find(trial_id);
  if (p == st.points.end() || error)
    return;
  auto m = result.find(st.metric);
  if (m == result.end() || m->second.is_string() || !std::isfinite(m->second.as_double()))
    return;
  auto y = m->second.as_double();
  st.gp->add_sample(p->second, st.mode == "max" ? y : -y);
}

void bayesopt_search::on_restored_trial(const std::string& trial_id, const config& cfg) {
  auto& st = *impl_;
  ++st.suggested;
  st.points[trial_id] = st.coordinates(cfg);
}

} // namespace hvactor::tune
