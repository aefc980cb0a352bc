// hvactor::tune's trial schedulers: FIFO, ASHA (Ray's
// AsyncHyperBandScheduler) and PBT (Ray's PopulationBasedTraining).
// Decisions use the results trials report; plain code over plain data,
// called under the tuner's lock.

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "tune/internal/space.hpp"

namespace hvactor::tune {

namespace {

void require_mode(const std::string& who, const std::string& metric, const std::string& mode) {
  if (metric.empty() || mode.empty())
    throw std::invalid_argument(fmt::format(
      "{} needs a metric and a mode: set tune_config.metric and tune_config.mode "
      "(or the scheduler's own)",
      who));
  if (mode != "min" && mode != "max")
    throw std::invalid_argument(
      fmt::format("{}: mode must be 'min' or 'max': Got '{}'.", who, mode));
}

/// numpy's nanpercentile with linear interpolation; `xs` has no NaN.
double percentile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  auto pos = q / 100.0 * static_cast<double>(xs.size() - 1);
  auto lo = static_cast<size_t>(std::floor(pos));
  auto hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (pos - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}

std::optional<double> number_of(const metrics& m, const std::string& name) {
  auto i = m.find(name);
  if (i == m.end() || i->second.is_string())
    return std::nullopt;
  return i->second.as_double();
}

} // namespace

void scheduler::set_search_properties(const std::string& metric, const std::string& mode) {
  if (metric_.empty())
    metric_ = metric;
  if (mode_.empty())
    mode_ = mode;
}

std::optional<double> scheduler::score(const metrics& result) const {
  auto x = number_of(result, metric_);
  if (!x || std::isnan(*x))
    return std::nullopt;
  return mode_ == "min" ? -*x : *x;
}

// -- ASHA --------------------------------------------------------------------------

asha_scheduler::asha_scheduler(options o) : o_(std::move(o)), gen_(o_.seed) {
  if (!(o_.grace_period > 0))
    throw std::invalid_argument(
      fmt::format("asha_scheduler: grace_period must be > 0: Got {}.", o_.grace_period));
  if (!(o_.max_t >= o_.grace_period))
    throw std::invalid_argument(fmt::format(
      "asha_scheduler: max_t must be >= grace_period: Got {} and {}.", o_.max_t, o_.grace_period));
  if (!(o_.reduction_factor > 1))
    throw std::invalid_argument(fmt::format(
      "asha_scheduler: reduction_factor must be > 1: Got {}.", o_.reduction_factor));
  if (o_.brackets < 1)
    throw std::invalid_argument(
      fmt::format("asha_scheduler: brackets must be >= 1: Got {}.", o_.brackets));
  metric_ = o_.metric;
  mode_ = o_.mode;
  // Bracket s: rungs at grace_period * rf^(k + s), the highest first.
  auto rungs_total = std::log(o_.max_t / o_.grace_period) / std::log(o_.reduction_factor);
  for (int s = 0; s < o_.brackets; ++s) {
    std::vector<rung> b;
    auto n = static_cast<int>(rungs_total - s + 1 + 1e-9);
    for (int k = n - 1; k >= 0; --k)
      b.push_back({o_.grace_period * std::pow(o_.reduction_factor, k + s), {}});
    brackets_.push_back(std::move(b));
  }
}

void asha_scheduler::set_search_properties(const std::string& metric, const std::string& mode) {
  scheduler::set_search_properties(metric, mode);
  require_mode("asha_scheduler", metric_, mode_);
}

void asha_scheduler::on_trial_add(const trial_info& t) {
  if (bracket_of_.count(t.trial_id))
    return;
  // Ray: a bracket drawn with softmax weights of its rung counts.
  std::vector<double> w;
  double top = 0;
  for (auto& b : brackets_)
    top = std::max(top, static_cast<double>(b.size()));
  for (auto& b : brackets_)
    w.push_back(std::exp(static_cast<double>(b.size()) - top));
  std::discrete_distribution<size_t> pick{w.begin(), w.end()};
  bracket_of_[t.trial_id] = brackets_.size() == 1 ? 0 : pick(gen_);
}

decision asha_scheduler::on_trial_result(const trial_info& t, const metrics& result) {
  auto now = number_of(result, o_.time_attr);
  if (!now || !result.count(metric_))
    return decision::go_on();
  if (!bracket_of_.count(t.trial_id))
    on_trial_add(t);
  if (*now >= o_.max_t) {
    ++num_stopped_;
    auto d = decision::stop();
    d.early = false;
    return d;
  }
  auto rew = score(result);
  auto d = decision::go_on();
  for (auto& r : brackets_[bracket_of_[t.trial_id]]) {
    if (*now < r.milestone || r.recorded.count(t.trial_id))
      continue;
    if (!r.recorded.empty() && rew) {
      std::vector<double> xs;
      for (auto& [id, x] : r.recorded)
        xs.push_back(x);
      auto cutoff = percentile(xs, (1 - 1 / o_.reduction_factor) * 100);
      if (*rew < cutoff)
        d = decision::stop();
    }
    if (rew)
      r.recorded[t.trial_id] = *rew;
    break;
  }
  if (d.kind == decision::stop_trial)
    ++num_stopped_;
  return d;
}

std::string asha_scheduler::debug_string() const {
  std::string out = fmt::format("Using AsyncHyperBand: num_stopped={}", num_stopped_);
  for (size_t b = 0; b < brackets_.size(); ++b) {
    out += fmt::format("\nBracket {}:", b);
    for (auto& r : brackets_[b])
      out += fmt::format(" Iter {:g}: {} trials;", r.milestone, r.recorded.size());
  }
  return out;
}

// -- PBT ---------------------------------------------------------------------------

pbt_scheduler::pbt_scheduler(options o) : o_(std::move(o)), gen_(o_.seed) {
  if (!(o_.perturbation_interval > 0))
    throw std::invalid_argument(fmt::format("pbt_scheduler: perturbation_interval must be > 0: "
                                            "Got {}.",
                                            o_.perturbation_interval));
  if (o_.hyperparam_mutations.empty())
    throw std::invalid_argument("pbt_scheduler: hyperparam_mutations is empty: name at least "
                                "one hyperparameter to mutate");
  for (auto& [name, m] : o_.hyperparam_mutations)
    if (auto* list = std::get_if<std::vector<value>>(&m); list && list->empty())
      throw std::invalid_argument(
        fmt::format("pbt_scheduler: hyperparam_mutations['{}'] is an empty list", name));
  if (!(o_.quantile_fraction >= 0 && o_.quantile_fraction <= 0.5))
    throw std::invalid_argument(fmt::format(
      "pbt_scheduler: quantile_fraction must be in [0, 0.5]: Got {}.", o_.quantile_fraction));
  if (!(o_.resample_probability >= 0 && o_.resample_probability <= 1))
    throw std::invalid_argument(fmt::format(
      "pbt_scheduler: resample_probability must be in [0, 1]: Got {}.", o_.resample_probability));
  metric_ = o_.metric;
  mode_ = o_.mode;
}

void pbt_scheduler::set_search_properties(const std::string& metric, const std::string& mode) {
  scheduler::set_search_properties(metric, mode);
  require_mode("pbt_scheduler", metric_, mode_);
}

std::pair<std::vector<std::string>, std::vector<std::string>> pbt_scheduler::quantiles() const {
  std::vector<std::pair<double, std::string>> scored;
  for (auto& [id, m] : members_)
    if (m.score && !m.done)
      scored.emplace_back(*m.score, id);
  if (scored.size() <= 1)
    return {};
  std::stable_sort(scored.begin(), scored.end(),
                   [](auto& a, auto& b) { return a.first < b.first; });
  auto n = static_cast<size_t>(std::ceil(static_cast<double>(scored.size()) * o_.quantile_fraction));
  if (static_cast<double>(n) > static_cast<double>(scored.size()) / 2)
    n = scored.size() / 2;
  std::vector<std::string> lower, upper;
  for (size_t i = 0; i < n; ++i) {
    lower.push_back(scored[i].second);
    upper.push_back(scored[scored.size() - 1 - i].second);
  }
  return {lower, upper};
}

config pbt_scheduler::explore(const config& cfg) {
  auto out = cfg;
  std::uniform_real_distribution<double> coin{0, 1};
  for (auto& [name, m] : o_.hyperparam_mutations) {
    auto now = cfg.find(name);
    if (auto* list = std::get_if<std::vector<value>>(&m)) {
      // 1 and 1.0 are the same value here, as in Python.
      auto same = [&](const value& v) {
        if (v.is_string() || now->second.is_string())
          return v == now->second;
        return v.as_double() == now->second.as_double();
      };
      auto at = now == cfg.end() ? list->end() : std::find_if(list->begin(), list->end(), same);
      if (at == list->end() || coin(gen_) < o_.resample_probability) {
        out[name] = (*list)[std::uniform_int_distribution<size_t>{0, list->size() - 1}(gen_)];
      } else {
        // A neighbour, up or down, held at the ends.
        auto i = static_cast<int64_t>(at - list->begin());
        i += coin(gen_) < 0.5 ? -1 : 1;
        i = std::clamp<int64_t>(i, 0, static_cast<int64_t>(list->size()) - 1);
        out[name] = (*list)[static_cast<size_t>(i)];
      }
      continue;
    }
    auto& d = std::get<domain>(m);
    if (now == cfg.end() || now->second.is_string() || !d.numeric()
        || coin(gen_) < o_.resample_probability) {
      out[name] = d.sample(gen_);
      continue;
    }
    auto factor = coin(gen_) < 0.5 ? o_.perturbation_factors.first : o_.perturbation_factors.second;
    if (now->second.is_int())
      out[name] = static_cast<int64_t>(static_cast<double>(now->second.as_int()) * factor);
    else
      out[name] = now->second.as_double() * factor;
  }
  return out;
}

decision pbt_scheduler::on_trial_result(const trial_info& t, const metrics& result) {
  auto now = number_of(result, o_.time_attr);
  if (!now || !result.count(metric_))
    return decision::go_on();
  auto& me = members_[t.trial_id];
  me.config = t.config;
  if (*now - me.last_perturbation < o_.perturbation_interval)
    return decision::go_on();
  me.last_perturbation = *now;
  me.score = score(result);
  me.checkpoint = t.checkpoint;
  me.iteration = number_of(result, "training_iteration").value_or(0);
  me.time_total_s = number_of(result, "time_total_s").value_or(0);
  me.result = result;
  auto [lower, upper] = quantiles();
  if (std::find(lower.begin(), lower.end(), t.trial_id) == lower.end())
    return decision::go_on();
  // Exploit: a random trial of the top quantile that has a checkpoint.
  std::vector<std::string> donors;
  for (auto& id : upper)
    if (members_[id].checkpoint)
      donors.push_back(id);
  if (donors.empty())
    return decision::go_on();
  auto& donor =
    members_[donors[std::uniform_int_distribution<size_t>{0, donors.size() - 1}(gen_)]];
  decision d;
  d.kind = decision::restart_trial;
  d.config = explore(donor.config);
  d.checkpoint = donor.checkpoint;
  d.iteration = donor.iteration;
  d.time_total_s = donor.time_total_s;
  d.checkpoint_result = donor.result;
  // As Ray: the clone keeps its own (low) score until it reports again,
  // takes the donor's place in time, and has no checkpoint to give until
  // its next perturbation.
  me.last_perturbation = donor.last_perturbation;
  me.checkpoint = {};
  me.config = d.config;
  ++num_perturbations_;
  return d;
}

void pbt_scheduler::on_trial_complete(const trial_info& t, const metrics&) {
  members_[t.trial_id].done = true;
}

void pbt_scheduler::on_trial_error(const trial_info& t) {
  members_[t.trial_id].done = true;
}

std::string pbt_scheduler::debug_string() const {
  return fmt::format("PopulationBasedTraining: {} checkpoints, {} perturbs", members_.size(),
                     num_perturbations_);
}

} // namespace hvactor::tune
