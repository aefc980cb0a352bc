// hvactor::tune's search spaces (Ray's tune.uniform, tune.grid_search, ...)
// and the basic variant generator that draws from them.

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "tune/internal/space.hpp"

namespace hvactor::tune {

namespace {

void require_finite(const char* what, double lower, double upper) {
  if (!std::isfinite(lower) || !std::isfinite(upper))
    throw std::invalid_argument(
      fmt::format("{}: the bounds must be finite: Got ({}, {}).", what, lower, upper));
  if (!(lower < upper))
    throw std::invalid_argument(
      fmt::format("{}: lower must be below upper: Got ({}, {}).", what, lower, upper));
}

void flatten_into(const param_space& space, const std::string& prefix, std::vector<leaf>& out) {
  if (space.empty())
    throw std::invalid_argument(prefix.empty() ? "param_space is empty: give at least one entry"
                                               : fmt::format("param_space entry '{}' is an "
                                                             "empty nested space",
                                                             prefix.substr(0, prefix.size() - 1)));
  for (auto& [name, p] : space) {
    if (name.empty() || name.find('/') != std::string::npos)
      throw std::invalid_argument(fmt::format(
        "param_space names must be non-empty and without '/': Got '{}{}'.", prefix, name));
    if (auto* nested = std::get_if<std::shared_ptr<const param_space>>(&p.get()))
      flatten_into(**nested, prefix + name + "/", out);
    else
      out.push_back({prefix + name, &p});
  }
}

} // namespace

domain uniform(double lower, double upper) {
  require_finite("uniform", lower, upper);
  domain d;
  d.kind_ = domain::kind::uniform;
  d.lower_ = lower;
  d.upper_ = upper;
  return d;
}

domain quniform(double lower, double upper, double q) {
  require_finite("quniform", lower, upper);
  if (!(q > 0) || !std::isfinite(q))
    throw std::invalid_argument(fmt::format("quniform: q must be > 0: Got {}.", q));
  // Ray: the draws are multiples of q; there must be one within the bounds.
  if (std::ceil(lower / q - 1e-9) * q > upper * (1 + 1e-12) + 1e-300)
    throw std::invalid_argument(fmt::format(
      "quniform: no multiple of q = {} lies within [{}, {}]", q, lower, upper));
  domain d = uniform(lower, upper);
  d.kind_ = domain::kind::quniform;
  d.q_ = q;
  return d;
}

domain loguniform(double lower, double upper, double base) {
  require_finite("loguniform", lower, upper);
  if (!(lower > 0))
    throw std::invalid_argument(
      fmt::format("loguniform: lower must be > 0: Got {}.", lower));
  if (!(base > 0) || base == 1 || !std::isfinite(base))
    throw std::invalid_argument(
      fmt::format("loguniform: base must be > 0 and not 1: Got {}.", base));
  domain d = uniform(lower, upper);
  d.kind_ = domain::kind::loguniform;
  d.q_ = base;
  return d;
}

domain randint(int64_t lower, int64_t upper) {
  if (!(lower < upper))
    throw std::invalid_argument(fmt::format(
      "randint: lower must be below upper (upper is exclusive): Got ({}, {}).", lower, upper));
  domain d;
  d.kind_ = domain::kind::randint;
  d.lower_ = static_cast<double>(lower);
  d.upper_ = static_cast<double>(upper);
  d.ilower_ = lower;
  d.iupper_ = upper;
  return d;
}

domain choice(std::vector<value> categories) {
  if (categories.empty())
    throw std::invalid_argument("choice: give at least one category");
  domain d;
  d.kind_ = domain::kind::choice;
  d.categories_ = std::move(categories);
  return d;
}

grid grid_search(std::vector<value> values) {
  if (values.empty())
    throw std::invalid_argument("grid_search: give at least one value");
  return grid{std::move(values)};
}

param::param(param_space nested)
    : v_(std::make_shared<const param_space>(std::move(nested))) {
}

value domain::sample(std::mt19937_64& gen) const {
  switch (kind_) {
    case kind::uniform:
      return std::uniform_real_distribution<double>{lower_, upper_}(gen);
    case kind::quniform: {
      auto x = std::uniform_real_distribution<double>{lower_, upper_}(gen);
      auto r = std::round(x / q_) * q_;
      // Ray rounds to the grid; a grid point outside the bounds moves in.
      while (r > upper_ + 1e-12 * std::abs(upper_))
        r -= q_;
      while (r < lower_ - 1e-12 * std::abs(lower_))
        r += q_;
      return r;
    }
    case kind::loguniform: {
      auto e = std::uniform_real_distribution<double>{std::log(lower_), std::log(upper_)}(gen);
      return std::clamp(std::exp(e), lower_, upper_);
    }
    case kind::randint:
      return std::uniform_int_distribution<int64_t>{ilower_, iupper_ - 1}(gen);
    case kind::choice:
      return categories_[std::uniform_int_distribution<size_t>{0, categories_.size() - 1}(gen)];
  }
  return {};
}

bool domain::contains(const value& v) const {
  if (kind_ == kind::choice)
    return std::find(categories_.begin(), categories_.end(), v) != categories_.end();
  if (v.is_string())
    return false;
  auto x = v.as_double();
  if (kind_ == kind::randint)
    return v.is_int() && v.as_int() >= ilower_ && v.as_int() < iupper_;
  return x >= lower_ && x <= upper_;
}

std::string domain::to_string() const {
  auto num = [](double x) { return fmt::format("{}", x); };
  switch (kind_) {
    case kind::uniform:
      return fmt::format("uniform({}, {})", num(lower_), num(upper_));
    case kind::quniform:
      return fmt::format("quniform({}, {}, {})", num(lower_), num(upper_), num(q_));
    case kind::loguniform:
      return fmt::format("loguniform({}, {})", num(lower_), num(upper_));
    case kind::randint:
      return fmt::format("randint({}, {})", ilower_, iupper_);
    case kind::choice: {
      std::string out;
      for (auto& c : categories_)
        out += (out.empty() ? "" : ", ") + show(c);
      return "choice([" + out + "])";
    }
  }
  return {};
}

std::string show(const value& v) {
  return v.is_string() ? "'" + v.as_string() + "'" : v.to_string();
}

std::string describe(const param& p) {
  if (auto* v = std::get_if<value>(&p.get()))
    return show(*v);
  if (auto* d = std::get_if<domain>(&p.get()))
    return d->to_string();
  if (auto* g = std::get_if<grid>(&p.get())) {
    std::string out;
    for (auto& v : g->values)
      out += (out.empty() ? "" : ", ") + show(v);
    return "grid_search([" + out + "])";
  }
  return "{...}";
}

std::vector<leaf> flatten(const param_space& space) {
  std::vector<leaf> out;
  flatten_into(space, "", out);
  return out;
}

const char* to_string(trial_status s) noexcept {
  switch (s) {
    case trial_status::pending:
      return "PENDING";
    case trial_status::running:
      return "RUNNING";
    case trial_status::terminated:
      return "TERMINATED";
    case trial_status::error:
      return "ERROR";
  }
  return "?";
}

// -- basic_variant_generator -------------------------------------------------------

void basic_variant_generator::set_search_properties(const std::string&, const std::string&,
                                                    const param_space& space, uint64_t seed) {
  flatten(space); // validates
  space_ = space;
  gen_.seed(seed);
  made_ = 0;
  grid_size_ = 1;
  for (auto& l : flatten(space_))
    if (auto* g = std::get_if<grid>(&l.p->get())) {
      if (grid_size_ > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(g->values.size()))
        throw std::invalid_argument("param_space: the grid has more than 2^63 points");
      grid_size_ *= static_cast<int64_t>(g->values.size());
    }
}

int64_t basic_variant_generator::total_trials(int64_t num_samples) const {
  if (num_samples < 0)
    return -1;
  return num_samples * grid_size_;
}

std::optional<config> basic_variant_generator::suggest(const std::string&) {
  if (num_samples_ >= 0 && made_ >= num_samples_ * grid_size_)
    return std::nullopt;
  // Sample k of num_samples, grid point i: the first grid varies fastest.
  auto index = made_ % grid_size_;
  ++made_;
  config cfg;
  for (auto& l : flatten(space_)) {
    auto& p = l.p->get();
    if (auto* v = std::get_if<value>(&p)) {
      cfg[l.path] = *v;
    } else if (auto* d = std::get_if<domain>(&p)) {
      cfg[l.path] = d->sample(gen_);
    } else if (auto* g = std::get_if<grid>(&p)) {
      auto n = static_cast<int64_t>(g->values.size());
      cfg[l.path] = g->values[static_cast<size_t>(index % n)];
      index /= n;
    }
  }
  return cfg;
}

} // namespace hvactor::tune
