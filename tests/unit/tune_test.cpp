// hvactor::tune's plain parts, without a runtime: search spaces and the
// basic variant generator (bounds, coverage, seeds, grids crossed, nested
// names), ASHA and PBT decisions worked out by hand as Ray makes them,
// BayesOpt on a 1-D parabola, and the experiment directory's JSON (values
// and experiment_state.json round trips, unreadable files).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/tune.hpp"
#include "tune/internal/experiment.hpp"
#include "unit_temp_dir.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace tune = hvactor::tune;

namespace {

using tune::decision;
using tune::value;

/// `n` draws of `d` from one seeded generator.
std::vector<value> draws(const tune::domain& d, int n = 2000, uint64_t seed = 7) {
  std::mt19937_64 gen{seed};
  std::vector<value> out;
  for (int i = 0; i < n; ++i)
    out.push_back(d.sample(gen));
  return out;
}

std::vector<double> as_doubles(const std::vector<value>& vs) {
  std::vector<double> out;
  for (auto& v : vs) {
    REQUIRE_FALSE(v.is_string());
    out.push_back(v.as_double());
  }
  return out;
}

/// Every config `gen` suggests (at most `limit`), then whether it ended.
std::vector<tune::config> drain(tune::search_alg& gen, size_t limit = 1000) {
  std::vector<tune::config> out;
  while (out.size() < limit) {
    auto c = gen.suggest("trial_" + std::to_string(out.size()));
    if (!c)
      break;
    out.push_back(*c);
  }
  return out;
}

/// A basic variant generator over `space`, `n` samples, seeded.
std::vector<tune::config> variants(const tune::param_space& space, int64_t n, uint64_t seed) {
  tune::basic_variant_generator gen;
  gen.set_search_properties("", "", space, seed);
  gen.set_num_samples(n);
  return drain(gen);
}

tune::param_space mixed_space() {
  return {{"lr", tune::loguniform(1e-4, 1e-1)},
          {"units", tune::randint(8, 64)},
          {"act", tune::choice({"relu", "tanh", "gelu"})},
          {"drop", tune::uniform(0, 0.5)},
          {"wd", tune::quniform(0, 1, 0.25)}};
}

// -- ASHA helpers --------------------------------------------------------------------

tune::asha_scheduler::options asha_options(double rf) {
  return {.time_attr = "training_iteration",
          .metric = "loss",
          .mode = "min",
          .max_t = 16,
          .grace_period = 1,
          .reduction_factor = rf};
}

decision::kind_t asha_report(tune::asha_scheduler& s, const std::string& id, int64_t iter,
                             double loss) {
  return s.on_trial_result(tune::trial_info{.trial_id = id},
                           tune::metrics{{"training_iteration", iter}, {"loss", loss}})
    .kind;
}

/// The scores recorded at `milestone` of bracket 0.
std::map<std::string, double> recorded_at(const tune::asha_scheduler& s, double milestone) {
  for (auto& r : s.brackets().at(0))
    if (r.milestone == milestone)
      return r.recorded;
  FAIL("no rung at ", milestone);
  return {};
}

// -- PBT helpers ---------------------------------------------------------------------

const std::vector<value> lr_list{0.001, 0.01, 0.1};

tune::pbt_scheduler::options pbt_options() {
  return {.time_attr = "training_iteration",
          .metric = "score",
          .mode = "max",
          .perturbation_interval = 2,
          .hyperparam_mutations = {{"lr", lr_list}},
          .quantile_fraction = 0.25,
          .resample_probability = 0,
          .seed = 1};
}

/// One result of trial `id` (config lr) at `iter`, with its latest
/// checkpoint "/ckpt/<id>/<ckpt_iter>" and time_total_s = 10 * iter.
decision pbt_report(tune::pbt_scheduler& s, const std::string& id, double lr, int64_t iter,
                    double score, int64_t ckpt_iter) {
  tune::trial_info t{.trial_id = id,
                     .config = {{"lr", lr}},
                     .checkpoint = train::checkpoint::from_directory(
                       "/ckpt/" + id + "/" + std::to_string(ckpt_iter))};
  return s.on_trial_result(t, {{"training_iteration", iter},
                               {"score", score},
                               {"time_total_s", 10.0 * static_cast<double>(iter)}});
}

/// The neighbours of `lr` in lr_list, held at the ends.
std::set<double> neighbours(double lr) {
  auto i = std::find(lr_list.begin(), lr_list.end(), value{lr}) - lr_list.begin();
  REQUIRE(i < static_cast<long>(lr_list.size()));
  std::set<double> out;
  for (auto j : {i - 1, i + 1})
    out.insert(lr_list[static_cast<size_t>(std::clamp<long>(j, 0, 2))].as_double());
  return out;
}

// -- experiment helpers --------------------------------------------------------------

/// A space's leaves by '/'-joined path, walked here (not by flatten()).
void leaves(const tune::param_space& space, const std::string& prefix,
            std::map<std::string, const tune::param*>& out) {
  for (auto& [name, p] : space) {
    if (auto* nested = std::get_if<std::shared_ptr<const tune::param_space>>(&p.get()))
      leaves(**nested, prefix + name + "/", out);
    else
      out[prefix + name] = &p;
  }
}

void check_same_param(const std::string& path, const tune::param& a, const tune::param& b) {
  INFO("param_space entry ", path);
  REQUIRE(a.get().index() == b.get().index());
  if (auto* v = std::get_if<value>(&a.get())) {
    CHECK(*v == std::get<value>(b.get()));
  } else if (auto* g = std::get_if<tune::grid>(&a.get())) {
    CHECK(g->values == std::get<tune::grid>(b.get()).values);
  } else {
    auto& d = std::get<tune::domain>(a.get());
    auto& e = std::get<tune::domain>(b.get());
    CHECK(d.type() == e.type());
    CHECK(d.to_string() == e.to_string());
    if (d.numeric()) {
      CHECK(d.lower() == e.lower());
      CHECK(d.upper() == e.upper());
      CHECK(d.q() == e.q());
    } else {
      CHECK(d.categories() == e.categories());
    }
  }
}

void check_same_space(const tune::param_space& a, const tune::param_space& b) {
  std::map<std::string, const tune::param*> la, lb;
  leaves(a, "", la);
  leaves(b, "", lb);
  std::set<std::string> na, nb;
  for (auto& [k, _] : la)
    na.insert(k);
  for (auto& [k, _] : lb)
    nb.insert(k);
  REQUIRE(na == nb);
  for (auto& [k, p] : la)
    check_same_param(k, *p, *lb.at(k));
}

} // namespace

// == search spaces ===================================================================

TEST_CASE("tune: uniform draws stay within its bounds and cover them") {
  auto xs = as_doubles(draws(tune::uniform(-2, 3)));
  auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  CHECK(*lo >= -2);
  CHECK(*hi <= 3);
  // 2000 draws over a width of 5: the extremes lie within 0.1 of the
  // bounds (each miss has probability (1 - 0.02)^2000 ~ 3e-18).
  CHECK(*lo < -1.9);
  CHECK(*hi > 2.9);
  // Mean 0.5, standard error 5 / sqrt(12 * 2000) ~ 0.032.
  double mean = 0;
  for (double x : xs)
    mean += x / static_cast<double>(xs.size());
  CHECK(std::abs(mean - 0.5) < 0.15);
}

TEST_CASE("tune: quniform draws are multiples of q within the bounds, every grid point hit") {
  // Ray's quniform: round(x / q) * q with x uniform in [0, 1]; q = 0.25
  // gives 0, 0.25, 0.5, 0.75, 1 (the ends half as likely: 1/8 each).
  auto xs = as_doubles(draws(tune::quniform(0, 1, 0.25)));
  std::set<double> seen;
  for (double x : xs) {
    CHECK(x >= 0);
    CHECK(x <= 1);
    CHECK(std::abs(x / 0.25 - std::round(x / 0.25)) < 1e-9);
    seen.insert(x);
  }
  CHECK(seen == std::set<double>{0, 0.25, 0.5, 0.75, 1});

  // Bounds off the grid: the multiples of 0.1 inside [0.05, 0.97] only
  // (0.1 ... 0.9; 1.0 lies above the upper bound and moves in to 0.9).
  auto ys = as_doubles(draws(tune::quniform(0.05, 0.97, 0.1)));
  std::set<long> tenths;
  for (double y : ys) {
    CHECK(y >= 0.05);
    CHECK(y <= 0.97);
    CHECK(std::abs(y / 0.1 - std::round(y / 0.1)) < 1e-9);
    tenths.insert(std::lround(y / 0.1));
  }
  CHECK(tenths == std::set<long>{1, 2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("tune: quniform never draws outside its bounds, even with no multiple of q inside") {
  // BUG: tune/search_space.cpp quniform()/domain::sample: with no multiple
  // of q in [lower, upper] (here [0.01, 0.02], q = 0.1) sample() rounds to
  // 0, moves up by q and returns 0.1 -- five times the upper bound. Ray
  // refuses such a domain when it is made (Float.quantized raises
  // ValueError: the bounds must be divisible by q). Either answer passes:
  // refusing it here, or drawing only within the bounds.
  std::optional<tune::domain> d;
  try {
    d = tune::quniform(0.01, 0.02, 0.1);
  } catch (const std::invalid_argument&) {
    return;
  }
  auto xs = as_doubles(draws(*d, 50));
  auto outside = std::find_if(xs.begin(), xs.end(), [](double x) { return x < 0.01 || x > 0.02; });
  INFO("drew ", outside == xs.end() ? 0.015 : *outside);
  CHECK(outside == xs.end());
}

TEST_CASE("tune: loguniform draws stay within its bounds and spread evenly in log space") {
  auto xs = as_doubles(draws(tune::loguniform(1e-4, 1e-1)));
  auto [lo, hi] = std::minmax_element(xs.begin(), xs.end());
  CHECK(*lo >= 1e-4);
  CHECK(*hi <= 1e-1);
  CHECK(*lo < 2e-4);
  CHECK(*hi > 5e-2);
  // Three decades equally likely: a third of the draws below 1e-3
  // (standard error sqrt(2/9 / 2000) ~ 0.011).
  auto below = std::count_if(xs.begin(), xs.end(), [](double x) { return x < 1e-3; });
  CHECK(static_cast<double>(below) / 2000 == doctest::Approx(1.0 / 3).epsilon(0.15));
  // The base changes nothing but the name of the exponent.
  for (double x : as_doubles(draws(tune::loguniform(1, 8, 2), 200))) {
    CHECK(x >= 1);
    CHECK(x <= 8);
  }
}

TEST_CASE("tune: randint draws integers below its exclusive upper bound, every one of them") {
  auto d = tune::randint(-3, 4);
  std::set<int64_t> seen;
  for (auto& v : draws(d)) {
    REQUIRE(v.is_int());
    CHECK(v.as_int() >= -3);
    CHECK(v.as_int() < 4); // Ray's tune.randint: upper exclusive
    seen.insert(v.as_int());
  }
  CHECK(seen == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
  CHECK(d.contains(value{3}));
  CHECK_FALSE(d.contains(value{4}));
  CHECK_FALSE(d.contains(value{2.5}));

  std::set<int64_t> one;
  for (auto& v : draws(tune::randint(5, 6), 50))
    one.insert(v.as_int());
  CHECK(one == std::set<int64_t>{5});
}

TEST_CASE("tune: randint keeps bounds beyond 2^53 exact") {
  // BUG: tune/search_space.cpp randint() keeps its bounds as double
  // (domain::lower_/upper_), so 2^53 + 1 becomes 2^53 and 2^53 + 3 becomes
  // 2^53 + 4: randint(2^53 + 1, 2^53 + 3) draws 2^53 and 2^53 + 3, outside
  // [lower, upper). Ray draws numpy int64s exactly. (Near 2^63, e.g.
  // randint(0, INT64_MAX), the cast back to int64_t overflows.)
  constexpr int64_t base = int64_t{1} << 53;
  std::set<int64_t> seen;
  std::string drawn;
  for (auto& v : draws(tune::randint(base + 1, base + 3), 200))
    if (seen.insert(v.as_int()).second)
      drawn += std::string{" 2^53"} + (v.as_int() >= base ? "+" : "") + std::to_string(v.as_int() - base);
  INFO("drew", drawn);
  CHECK(seen == std::set<int64_t>{base + 1, base + 2});
}

TEST_CASE("tune: choice draws each of its categories and nothing else") {
  std::vector<value> cats{"a", 1, 2.5};
  auto d = tune::choice(cats);
  std::map<size_t, int> counts;
  for (auto& v : draws(d)) {
    auto at = std::find(cats.begin(), cats.end(), v);
    REQUIRE(at != cats.end());
    ++counts[static_cast<size_t>(at - cats.begin())];
  }
  REQUIRE(counts.size() == 3);
  for (auto& [i, n] : counts)
    CHECK(n > 500); // ~667 each
  CHECK(d.contains(value{"a"}));
  CHECK_FALSE(d.contains(value{"b"}));
}

TEST_CASE("tune: domains with bad arguments throw invalid_argument") {
  auto nan = std::numeric_limits<double>::quiet_NaN();
  auto inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(tune::uniform(1, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::uniform(2, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::uniform(nan, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::uniform(0, nan), std::invalid_argument);
  CHECK_THROWS_AS(tune::uniform(-inf, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::uniform(0, inf), std::invalid_argument);
  CHECK_THROWS_AS(tune::quniform(0, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(tune::quniform(0, 1, -0.1), std::invalid_argument);
  CHECK_THROWS_AS(tune::quniform(0, 1, nan), std::invalid_argument);
  CHECK_THROWS_AS(tune::quniform(1, 0, 0.1), std::invalid_argument);
  CHECK_THROWS_AS(tune::quniform(0, inf, 0.1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(0, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(-1, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(1, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(1e-3, inf), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(nan, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(1e-3, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(tune::loguniform(1e-3, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(tune::randint(3, 3), std::invalid_argument);
  CHECK_THROWS_AS(tune::randint(4, 3), std::invalid_argument);
  CHECK_THROWS_AS(tune::choice({}), std::invalid_argument);
  CHECK_THROWS_AS(tune::grid_search({}), std::invalid_argument);
  // The good ones next to them do not.
  CHECK_NOTHROW(tune::uniform(-1, 1));
  CHECK_NOTHROW(tune::quniform(0, 1, 0.5));
  CHECK_NOTHROW(tune::loguniform(1e-3, 1));
  CHECK_NOTHROW(tune::randint(0, 1));
  CHECK_NOTHROW(tune::choice({1}));
  CHECK_NOTHROW(tune::grid_search({1}));
}

// == basic_variant_generator =========================================================

TEST_CASE("tune: the basic variant generator repeats its configs for a seed, not across seeds") {
  auto a = variants(mixed_space(), 20, 123);
  auto b = variants(mixed_space(), 20, 123);
  auto c = variants(mixed_space(), 20, 124);
  REQUIRE(a.size() == 20);
  REQUIRE(c.size() == 20);
  CHECK(a == b);
  CHECK(a != c);
  // Each config holds every entry, drawn from its domain.
  auto space = mixed_space();
  for (auto& cfg : a) {
    REQUIRE(cfg.size() == space.size());
    for (auto& [name, p] : space)
      CHECK(std::get<tune::domain>(p.get()).contains(cfg.at(name)));
  }
}

TEST_CASE("tune: the basic variant generator crosses grid_search entries num_samples times") {
  tune::param_space space{{"x", tune::grid_search({1, 2, 3})},
                          {"y", tune::grid_search({"a", "b"})},
                          {"lr", tune::uniform(0, 1)},
                          {"epochs", 7},
                          {"name", "resnet"},
                          {"momentum", 0.9}};
  tune::basic_variant_generator gen;
  gen.set_search_properties("", "", space, 5);
  gen.set_num_samples(2);
  // 3 x 2 grid points, twice.
  CHECK(gen.grid_size() == 6);
  CHECK(gen.total_trials(2) == 12);
  CHECK(gen.total_trials(-1) == -1);
  auto cfgs = drain(gen);
  REQUIRE(cfgs.size() == 12);
  CHECK_FALSE(gen.suggest("trial_12"));
  CHECK_FALSE(gen.suggest("trial_13"));

  std::map<std::pair<int64_t, std::string>, int> pairs;
  std::set<std::pair<int64_t, std::string>> first_sample;
  for (size_t i = 0; i < cfgs.size(); ++i) {
    auto& cfg = cfgs[i];
    CHECK(cfg.size() == 6);
    auto key = std::pair{cfg.at("x").as_int(), cfg.at("y").as_string()};
    ++pairs[key];
    if (i < 6)
      first_sample.insert(key);
    // Constants pass through as they are (an int stays an int).
    CHECK(cfg.at("epochs") == value{7});
    CHECK(cfg.at("epochs").is_int());
    CHECK(cfg.at("name") == value{"resnet"});
    CHECK(cfg.at("momentum") == value{0.9});
    CHECK(cfg.at("lr").as_double() >= 0);
    CHECK(cfg.at("lr").as_double() <= 1);
  }
  REQUIRE(pairs.size() == 6);
  for (auto& [k, n] : pairs) {
    INFO("x=", k.first, " y=", k.second);
    CHECK(n == 2);
  }
  // As Ray: one sample is the whole grid, then the next sample.
  CHECK(first_sample.size() == 6);
}

TEST_CASE("tune: the basic variant generator names nested entries with '/'") {
  tune::param_space space{
    {"model", tune::param_space{{"layers", tune::grid_search({2, 4})},
                                {"act", "relu"},
                                {"opt", tune::param_space{{"lr", tune::uniform(0.1, 0.2)}}}}},
    {"seed", 1}};
  auto cfgs = variants(space, 1, 3);
  REQUIRE(cfgs.size() == 2);
  std::set<int64_t> layers;
  for (auto& cfg : cfgs) {
    std::set<std::string> keys;
    for (auto& [k, _] : cfg)
      keys.insert(k);
    CHECK(keys == std::set<std::string>{"model/act", "model/layers", "model/opt/lr", "seed"});
    CHECK(cfg.at("model/act") == value{"relu"});
    CHECK(cfg.at("model/opt/lr").as_double() >= 0.1);
    CHECK(cfg.at("model/opt/lr").as_double() <= 0.2);
    layers.insert(cfg.at("model/layers").as_int());
  }
  CHECK(layers == std::set<int64_t>{2, 4});
}

TEST_CASE("tune: the basic variant generator refuses an empty or badly named space") {
  tune::basic_variant_generator gen;
  CHECK_THROWS_AS(gen.set_search_properties("", "", {}, 1), std::invalid_argument);
  CHECK_THROWS_AS(gen.set_search_properties("", "", {{"model", tune::param_space{}}}, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(gen.set_search_properties("", "", {{"a/b", 1}}, 1), std::invalid_argument);
  CHECK_THROWS_AS(gen.set_search_properties("", "", {{"", 1}}, 1), std::invalid_argument);
}

// == ASHA ============================================================================

TEST_CASE("tune: asha's rungs are Ray's milestones") {
  // Ray's _Bracket: MAX_RUNGS = int(log(max_t / grace) / log(rf) - s + 1),
  // milestones grace * rf^(k + s) for k = MAX_RUNGS - 1 ... 0. max_t 16,
  // rf 2: int(4 - 0 + 1) = 5 rungs, 16, 8, 4, 2, 1 (the one at 16 never
  // decides: a trial reaching max_t is stopped first).
  auto milestones = [](const tune::asha_scheduler& s, size_t b) {
    std::vector<double> out;
    for (auto& r : s.brackets().at(b))
      out.push_back(r.milestone);
    return out;
  };
  tune::asha_scheduler two{asha_options(2)};
  REQUIRE(two.brackets().size() == 1);
  CHECK(milestones(two, 0) == std::vector<double>{16, 8, 4, 2, 1});
  // rf 4: int(2 + 1) = 3 rungs: 16, 4, 1.
  tune::asha_scheduler four{asha_options(4)};
  CHECK(milestones(four, 0) == std::vector<double>{16, 4, 1});
  // Two brackets: s = 1 has int(4 - 1 + 1) = 4 rungs, 2 * 2^k: 16, 8, 4, 2.
  auto o = asha_options(2);
  o.brackets = 2;
  tune::asha_scheduler brackets{o};
  REQUIRE(brackets.brackets().size() == 2);
  CHECK(milestones(brackets, 1) == std::vector<double>{16, 8, 4, 2});
}

TEST_CASE("tune: asha lets better trials past a rung") {
  // rf 2: the cutoff is the 50th percentile of the scores already at the
  // rung; scores are -loss. Losses 4, 3, 2, 1 at iteration 1:
  //   t0 -4: nothing recorded            -> continue
  //   t1 -3: median{-4} = -4             -> continue
  //   t2 -2: median{-4, -3} = -3.5       -> continue
  //   t3 -1: median{-4, -3, -2} = -3     -> continue
  auto o = asha_options(2);
  o.metric.clear();
  o.mode.clear();
  tune::asha_scheduler s{o};
  s.set_search_properties("loss", "min");
  CHECK(asha_report(s, "t0", 1, 4) == decision::continue_trial);
  CHECK(asha_report(s, "t1", 1, 3) == decision::continue_trial);
  CHECK(asha_report(s, "t2", 1, 2) == decision::continue_trial);
  CHECK(asha_report(s, "t3", 1, 1) == decision::continue_trial);
  CHECK(s.num_stopped() == 0);
  CHECK(recorded_at(s, 1)
        == std::map<std::string, double>{{"t0", -4}, {"t1", -3}, {"t2", -2}, {"t3", -1}});
  CHECK(recorded_at(s, 2).empty());
}

TEST_CASE("tune: asha stops worse trials at a rung and still records them") {
  // Losses 1, 2, 3, 4 at iteration 1:
  //   t0 -1: nothing recorded            -> continue
  //   t1 -2 < median{-1} = -1            -> stop
  //   t2 -3 < median{-2, -1} = -1.5      -> stop
  //   t3 -4 < median{-3, -2, -1} = -2    -> stop
  tune::asha_scheduler s{asha_options(2)};
  s.set_search_properties("loss", "min");
  CHECK(asha_report(s, "t0", 1, 1) == decision::continue_trial);
  CHECK(asha_report(s, "t1", 1, 2) == decision::stop_trial);
  CHECK(asha_report(s, "t2", 1, 3) == decision::stop_trial);
  CHECK(asha_report(s, "t3", 1, 4) == decision::stop_trial);
  CHECK(s.num_stopped() == 3);
  CHECK(recorded_at(s, 1).size() == 4);
}

TEST_CASE("tune: asha with reduction factor 4 cuts at the interpolated 75th percentile") {
  // Rungs 16, 4, 1. Losses 5, 1, 3, 2, 4 at iteration 1 (numpy linear
  // percentile: position 0.75 * (n - 1) in the sorted scores):
  //   t0 -5: nothing recorded                                  -> continue
  //   t1 -1: p75{-5} = -5                                      -> continue
  //   t2 -3: p75{-5, -1}: pos 0.75, -5 + 0.75 * 4 = -2         -> stop
  //   t3 -2: p75{-5, -3, -1}: pos 1.5, -3 + 0.5 * 2 = -2       -> continue (not below)
  //   t4 -4: p75{-5, -3, -2, -1}: pos 2.25, -2 + 0.25 = -1.75  -> stop
  tune::asha_scheduler s{asha_options(4)};
  s.set_search_properties("loss", "min");
  CHECK(asha_report(s, "t0", 1, 5) == decision::continue_trial);
  CHECK(asha_report(s, "t1", 1, 1) == decision::continue_trial);
  CHECK(asha_report(s, "t2", 1, 3) == decision::stop_trial);
  CHECK(asha_report(s, "t3", 1, 2) == decision::continue_trial);
  CHECK(asha_report(s, "t4", 1, 4) == decision::stop_trial);
  CHECK(s.num_stopped() == 2);
  CHECK(recorded_at(s, 1).size() == 5);
}

TEST_CASE("tune: asha decides at each rung once and stops every trial at max_t") {
  tune::asha_scheduler s{asha_options(2)};
  s.set_search_properties("loss", "min");
  // Rung 1: t0 -1 first -> continue; t1 -0.5 vs median{-1} = -1 -> continue.
  CHECK(asha_report(s, "t0", 1, 1.0) == decision::continue_trial);
  CHECK(asha_report(s, "t1", 1, 0.5) == decision::continue_trial);
  // Rung 2: t0 -0.9 first there -> continue; t1 -0.95 < median{-0.9} -> stop.
  CHECK(asha_report(s, "t0", 2, 0.9) == decision::continue_trial);
  CHECK(asha_report(s, "t1", 2, 0.95) == decision::stop_trial);
  CHECK(recorded_at(s, 2) == std::map<std::string, double>{{"t0", -0.9}, {"t1", -0.95}});
  // Iteration 3: no rung of its own, rungs 2 and 1 passed: continue, even
  // with a much worse loss, and nothing new recorded.
  CHECK(asha_report(s, "t0", 3, 100) == decision::continue_trial);
  CHECK(recorded_at(s, 2).size() == 2);
  CHECK(recorded_at(s, 1).size() == 2);
  // Rung 4: first there -> continue.
  CHECK(asha_report(s, "t0", 4, 0.5) == decision::continue_trial);
  // max_t (16): stop, whatever the loss.
  CHECK(asha_report(s, "t0", 16, 0.0) == decision::stop_trial);
  CHECK(s.num_stopped() == 2);
  CHECK(recorded_at(s, 16).empty());
}

TEST_CASE("tune: asha lets a result without the metric or the time go on") {
  tune::asha_scheduler s{asha_options(2)};
  s.set_search_properties("loss", "min");
  CHECK(asha_report(s, "t0", 1, 1) == decision::continue_trial);
  // Worse than t0 but without the metric: nothing to decide on.
  auto d = s.on_trial_result(tune::trial_info{.trial_id = "t1"},
                             {{"training_iteration", 1}, {"accuracy", 0.1}});
  CHECK(d.kind == decision::continue_trial);
  // Without the time attribute, even past max_t's loss.
  d = s.on_trial_result(tune::trial_info{.trial_id = "t1"}, {{"loss", 50.0}});
  CHECK(d.kind == decision::continue_trial);
  CHECK(s.num_stopped() == 0);
  CHECK(recorded_at(s, 1).size() == 1);
  // Its first result with the metric is then judged: -2 < median{-1}.
  CHECK(asha_report(s, "t1", 1, 2) == decision::stop_trial);
}

TEST_CASE("tune: asha in mode max keeps the larger scores") {
  auto o = asha_options(2);
  o.metric = "accuracy";
  o.mode = "max";
  tune::asha_scheduler s{o};
  s.set_search_properties("loss", "min"); // the scheduler's own metric and mode win
  auto report = [&](const std::string& id, double acc) {
    return s.on_trial_result(tune::trial_info{.trial_id = id},
                             {{"training_iteration", 1}, {"accuracy", acc}, {"loss", 0.0}})
      .kind;
  };
  // t0 0.9 first -> continue; t1 0.5 < median{0.9} -> stop;
  // t2 0.95 vs median{0.5, 0.9} = 0.7 -> continue.
  CHECK(report("t0", 0.9) == decision::continue_trial);
  CHECK(report("t1", 0.5) == decision::stop_trial);
  CHECK(report("t2", 0.95) == decision::continue_trial);
  CHECK(recorded_at(s, 1)
        == std::map<std::string, double>{{"t0", 0.9}, {"t1", 0.5}, {"t2", 0.95}});
}

TEST_CASE("tune: asha refuses bad options and a missing metric or mode") {
  auto with = [](auto change) {
    auto o = asha_options(2);
    change(o);
    return o;
  };
  using opts = tune::asha_scheduler::options;
  CHECK_THROWS_AS(tune::asha_scheduler{with([](opts& o) { o.grace_period = 0; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::asha_scheduler{with([](opts& o) { o.max_t = 0.5; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::asha_scheduler{with([](opts& o) { o.reduction_factor = 1; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::asha_scheduler{with([](opts& o) { o.brackets = 0; })},
                  std::invalid_argument);

  tune::asha_scheduler bare;
  CHECK_THROWS_AS(bare.set_search_properties("", ""), std::invalid_argument);
  tune::asha_scheduler no_mode;
  CHECK_THROWS_AS(no_mode.set_search_properties("loss", ""), std::invalid_argument);
  tune::asha_scheduler avg;
  CHECK_THROWS_AS(avg.set_search_properties("loss", "avg"), std::invalid_argument);
  // Its own metric and mode are enough.
  tune::asha_scheduler own{asha_options(2)};
  CHECK_NOTHROW(own.set_search_properties("", ""));
}

// == PBT =============================================================================

TEST_CASE("tune: pbt exploits the top trial's checkpoint for the bottom one") {
  tune::pbt_scheduler s{pbt_options()};
  s.set_search_properties("", "");
  const std::map<std::string, double> lr{{"t0", 0.001}, {"t1", 0.001}, {"t2", 0.1}, {"t3", 0.01}};
  // Iteration 1: 1 - 0 < perturbation_interval 2 -> every trial goes on.
  for (auto& [id, x] : lr)
    CHECK(pbt_report(s, id, x, 1, 1 + (id[1] - '0'), 1).kind == decision::continue_trial);
  // Iteration 2, scores 1, 2, 3, 4 in order t0, t1, t2, t3. Quantiles
  // count the trials with a score at the time (n = ceil(k * 0.25), at
  // most k / 2):
  //   t0: only scored trial                      -> no quantiles, continue
  //   t1: {t0 1, t1 2}, n 1: bottom t0           -> continue
  //   t2: {1, 2, 3}, n 1: bottom t0              -> continue
  //   t3: {1, 2, 3, 4}, n 1: bottom t0, top t3   -> continue
  // t0 reported before anyone to compare with: no exploit yet.
  CHECK(pbt_report(s, "t0", lr.at("t0"), 2, 1, 2).kind == decision::continue_trial);
  CHECK(pbt_report(s, "t1", lr.at("t1"), 2, 2, 2).kind == decision::continue_trial);
  CHECK(pbt_report(s, "t2", lr.at("t2"), 2, 3, 2).kind == decision::continue_trial);
  CHECK(pbt_report(s, "t3", lr.at("t3"), 2, 4, 2).kind == decision::continue_trial);
  CHECK(s.num_perturbations() == 0);
  // Iteration 3: 3 - 2 < 2 -> continue (t0's checkpoint now 3).
  CHECK(pbt_report(s, "t0", lr.at("t0"), 3, 1, 3).kind == decision::continue_trial);
  // Iteration 4, t0 again at 1: scores {t0 1, t1 2, t2 3, t3 4}, n 1:
  // bottom t0, top t3 -> t0 restarts from t3's checkpoint of its last
  // perturbation (iteration 2, time_total_s 20), with t3's lr 0.01 moved
  // one step in [0.001, 0.01, 0.1].
  auto d = pbt_report(s, "t0", lr.at("t0"), 4, 1, 4);
  REQUIRE(d.kind == decision::restart_trial);
  CHECK(d.checkpoint.path() == "/ckpt/t3/2");
  CHECK(d.iteration == 2);
  CHECK(d.time_total_s == 20);
  REQUIRE(d.config.count("lr"));
  CHECK(neighbours(0.01).count(d.config.at("lr").as_double()));
  CHECK(s.num_perturbations() == 1);
  // The top trial at its own perturbation point goes on.
  CHECK(pbt_report(s, "t3", lr.at("t3"), 4, 5, 4).kind == decision::continue_trial);
  CHECK(s.num_perturbations() == 1);
}

TEST_CASE("tune: pbt with two scored trials restarts the worse from the better") {
  tune::pbt_scheduler s{pbt_options()};
  s.set_search_properties("", "");
  CHECK(pbt_report(s, "t1", 0.1, 2, 10, 2).kind == decision::continue_trial);
  // {t1 10, t0 5}: n = ceil(2 * 0.25) = 1 -> bottom t0, top t1.
  auto d = pbt_report(s, "t0", 0.001, 2, 5, 2);
  REQUIRE(d.kind == decision::restart_trial);
  CHECK(d.checkpoint.path() == "/ckpt/t1/2");
  CHECK(d.iteration == 2);
  // t1's lr 0.1 is the last: down to 0.01 or held at 0.1.
  CHECK(neighbours(0.1).count(d.config.at("lr").as_double()));
}

TEST_CASE("tune: pbt leaves finished trials out of the quantiles") {
  tune::pbt_scheduler s{pbt_options()};
  s.set_search_properties("", "");
  CHECK(pbt_report(s, "t1", 0.1, 2, 10, 2).kind == decision::continue_trial);
  s.on_trial_complete(tune::trial_info{.trial_id = "t1"}, {});
  // t1 finished: t2 is the only scored trial -> continue (with t1 counted,
  // {t1 10, t2 3} would make t2 the bottom and restart it from t1's).
  CHECK(pbt_report(s, "t2", 0.01, 2, 3, 2).kind == decision::continue_trial);
  // {t2 3, t3 2}: bottom t3, top t2.
  auto d = pbt_report(s, "t3", 0.001, 2, 2, 2);
  REQUIRE(d.kind == decision::restart_trial);
  CHECK(d.checkpoint.path() == "/ckpt/t2/2");
  // A failed trial as well.
  tune::pbt_scheduler e{pbt_options()};
  e.set_search_properties("", "");
  CHECK(pbt_report(e, "t1", 0.1, 2, 10, 2).kind == decision::continue_trial);
  e.on_trial_error(tune::trial_info{.trial_id = "t1"});
  CHECK(pbt_report(e, "t2", 0.01, 2, 3, 2).kind == decision::continue_trial);
}

TEST_CASE("tune: pbt never hands out a checkpoint that does not hold the donor's score") {
  // BUG: tune/schedulers.cpp pbt_scheduler::on_trial_result gives an
  // exploited trial the donor's score (me.score = donor.score) but keeps
  // its own old checkpoint, iteration and time in members_ (me.checkpoint
  // is only set at the trial's next perturbation point). Until then the
  // exploited trial ranks at the top and is itself picked as a donor,
  // handing out its pre-exploit checkpoint -- the weights that scored
  // worst. Ray's PBT leaves the exploited trial's last_score as it was
  // (and forgets its checkpoint, not being in the top quantile), so only
  // the real top trial donates.
  tune::pbt_scheduler s{pbt_options()};
  s.set_search_properties("", "");
  // Iteration 2: t0 scores 4 alone -> continue.
  CHECK(pbt_report(s, "t0", 0.01, 2, 4, 2).kind == decision::continue_trial);
  // t3 scores 3: {t0 4, t3 3}, n 1: bottom t3 -> restart from t0's.
  auto d3 = pbt_report(s, "t3", 0.01, 2, 3, 2);
  REQUIRE(d3.kind == decision::restart_trial);
  CHECK(d3.checkpoint.path() == "/ckpt/t0/2");
  // t1 scores 1: bottom t1. The only model that scored 4 is in t0's
  // checkpoint; /ckpt/t3/2 holds the model that scored 3.
  auto d1 = pbt_report(s, "t1", 0.01, 2, 1, 2);
  REQUIRE(d1.kind == decision::restart_trial);
  CHECK(d1.checkpoint.path() == "/ckpt/t0/2");
}

TEST_CASE("tune: pbt explore moves a list value to a neighbour when it does not resample") {
  tune::pbt_scheduler s{pbt_options()};
  std::map<double, std::set<double>> seen;
  for (double lr : {0.001, 0.01, 0.1})
    for (int i = 0; i < 200; ++i) {
      auto cfg = s.explore({{"lr", lr}, {"batch", 32}});
      CHECK(cfg.at("batch") == value{32}); // not a mutation: as it was
      seen[lr].insert(cfg.at("lr").as_double());
    }
  // One index up or down, held at the ends (each side has p = 1/2).
  CHECK(seen[0.001] == std::set<double>{0.001, 0.01});
  CHECK(seen[0.01] == std::set<double>{0.001, 0.1});
  CHECK(seen[0.1] == std::set<double>{0.01, 0.1});
  // A value not in the list, or missing: resampled from the list.
  for (int i = 0; i < 50; ++i) {
    CHECK(std::find(lr_list.begin(), lr_list.end(), s.explore({{"lr", 0.5}}).at("lr"))
          != lr_list.end());
    CHECK(std::find(lr_list.begin(), lr_list.end(), s.explore({}).at("lr")) != lr_list.end());
  }
}

TEST_CASE("tune: pbt explore multiplies a domain value by 1.2 or 0.8, or resamples it") {
  auto o = pbt_options();
  o.hyperparam_mutations = {{"wd", tune::uniform(2, 3)}, {"batch", tune::randint(1, 100)}};
  tune::pbt_scheduler perturb{o};
  std::set<double> wd;
  std::set<int64_t> batch;
  for (int i = 0; i < 200; ++i) {
    auto cfg = perturb.explore({{"wd", 0.5}, {"batch", 10}});
    wd.insert(cfg.at("wd").as_double());
    REQUIRE(cfg.at("batch").is_int()); // an int stays an int (Ray: int(x * f))
    batch.insert(cfg.at("batch").as_int());
  }
  // 0.5 * 1.2 = 0.6, 0.5 * 0.8 = 0.4 (not held to the domain, as Ray);
  // int(10 * 1.2) = 12, int(10 * 0.8) = 8.
  REQUIRE(wd.size() == 2);
  CHECK(*wd.begin() == doctest::Approx(0.4));
  CHECK(*wd.rbegin() == doctest::Approx(0.6));
  CHECK(batch == std::set<int64_t>{8, 12});

  o.resample_probability = 1;
  tune::pbt_scheduler resample{o};
  std::set<double> drawn;
  for (int i = 0; i < 200; ++i) {
    auto cfg = resample.explore({{"wd", 0.5}, {"batch", 10}});
    auto w = cfg.at("wd").as_double();
    CHECK(w >= 2);
    CHECK(w <= 3);
    drawn.insert(w);
    CHECK(cfg.at("batch").as_int() >= 1);
    CHECK(cfg.at("batch").as_int() < 100);
  }
  CHECK(drawn.size() > 150);
}

TEST_CASE("tune: pbt refuses bad options and a missing metric or mode") {
  auto with = [](auto change) {
    auto o = pbt_options();
    change(o);
    return o;
  };
  using opts = tune::pbt_scheduler::options;
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.perturbation_interval = 0; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.perturbation_interval = -1; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.hyperparam_mutations.clear(); })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) {
                    o.hyperparam_mutations = {{"lr", std::vector<value>{}}};
                  })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.quantile_fraction = 0.6; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.quantile_fraction = -0.1; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.resample_probability = 1.5; })},
                  std::invalid_argument);
  CHECK_THROWS_AS(tune::pbt_scheduler{with([](opts& o) { o.resample_probability = -0.1; })},
                  std::invalid_argument);
  CHECK_NOTHROW(tune::pbt_scheduler{with([](opts& o) { o.quantile_fraction = 0.5; })});

  auto bare = with([](opts& o) {
    o.metric.clear();
    o.mode.clear();
  });
  tune::pbt_scheduler none{bare};
  CHECK_THROWS_AS(none.set_search_properties("", ""), std::invalid_argument);
  tune::pbt_scheduler no_mode{bare};
  CHECK_THROWS_AS(no_mode.set_search_properties("score", ""), std::invalid_argument);
  tune::pbt_scheduler avg{bare};
  CHECK_THROWS_AS(avg.set_search_properties("score", "avg"), std::invalid_argument);
  tune::pbt_scheduler given{bare};
  CHECK_NOTHROW(given.set_search_properties("score", "max"));
}

// == BayesOpt ========================================================================

TEST_CASE("tune: bayesopt refuses choice and grid parameters, naming them") {
  auto refused = [](const tune::param_space& space) -> std::string {
    tune::bayesopt_search s;
    try {
      s.set_search_properties("loss", "min", space, 1);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(accepted)";
  };
  auto msg = refused({{"lr", tune::uniform(0, 1)}, {"activation", tune::choice({"relu", "tanh"})}});
  CHECK(msg.find("activation") != std::string::npos);
  msg = refused({{"lr", tune::uniform(0, 1)}, {"batch_size", tune::grid_search({32, 64})}});
  CHECK(msg.find("batch_size") != std::string::npos);
  msg = refused({{"model", tune::param_space{{"optimizer", tune::choice({"sgd", "adam"})}}},
                 {"lr", tune::uniform(0, 1)}});
  CHECK(msg.find("model/optimizer") != std::string::npos);
  // No metric or mode, or nothing to search.
  CHECK(refused({{"lr", tune::uniform(0, 1)}}) == "(accepted)");
  tune::bayesopt_search s;
  CHECK_THROWS_AS(s.set_search_properties("", "", {{"lr", tune::uniform(0, 1)}}, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(s.set_search_properties("loss", "avg", {{"lr", tune::uniform(0, 1)}}, 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(s.set_search_properties("loss", "min", {{"epochs", 3}}, 1),
                  std::invalid_argument);
}

namespace {

/// 16 rounds of suggest / complete on f(x) = -(x - 7)^2 over uniform(0,
/// 10) (mode max); the x of each suggestion.
std::vector<double> bayesopt_rounds(uint64_t seed) {
  tune::bayesopt_search s;
  s.set_search_properties("score", "max", {{"x", tune::uniform(0, 10)}, {"epochs", 3}}, seed);
  std::vector<double> xs;
  for (int i = 0; i < 16; ++i) {
    auto id = "trial_" + std::to_string(i);
    auto cfg = s.suggest(id);
    REQUIRE(cfg);
    CHECK(cfg->at("epochs") == value{3}); // constants pass through
    auto x = cfg->at("x").as_double();
    CHECK(x >= 0);
    CHECK(x <= 10);
    xs.push_back(x);
    s.on_trial_complete(id, {{"score", -(x - 7) * (x - 7)}, {"training_iteration", 1}}, false);
  }
  return xs;
}

} // namespace

TEST_CASE("tune: bayesopt converges on the maximum of a parabola") {
  // After 4 random steps and 7 guided ones, the best of the last five
  // lies within 1 of the maximum at 7 (for each of a few seeds).
  for (uint64_t seed : {1, 2, 11, 17, 26}) {
    auto xs = bayesopt_rounds(seed);
    double best = 10;
    std::string last;
    for (size_t i = xs.size() - 5; i < xs.size(); ++i) {
      best = std::min(best, std::abs(xs[i] - 7));
      last += " " + std::to_string(xs[i]);
    }
    INFO("seed ", seed, ", last five suggestions:", last);
    CHECK(best < 1.0);
  }
}

TEST_CASE("tune: bayesopt suggests the same configs for the same seed") {
  auto a = bayesopt_rounds(5);
  auto b = bayesopt_rounds(5);
  auto c = bayesopt_rounds(6);
  CHECK(a == b);
  CHECK(a[0] != c[0]);
}

// == the experiment directory's files ================================================

TEST_CASE("tune: to_json and metrics_from_json keep every value and its type") {
  auto inf = std::numeric_limits<double>::infinity();
  tune::metrics m{{"int", 42},
                  {"neg", -7},
                  {"zero", 0},
                  {"big", std::numeric_limits<int64_t>::max()},
                  {"small", std::numeric_limits<int64_t>::min()},
                  {"one", 1.0},
                  {"hundred_k", 100000.0},
                  {"tiny", 1e-300},
                  {"huge", 1e300},
                  {"tenth", 0.1},
                  {"pi", 3.141592653589793},
                  {"neg_zero", -0.0},
                  {"nan", std::nan("")},
                  {"inf", inf},
                  {"neg_inf", -inf},
                  {"quoted", "say \"hi\""},
                  {"backslash", "C:\\dir\\file"},
                  {"controls", "line1\nline2\ttab\rcr\x01"},
                  {"utf8", "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x9a\x80"},
                  {"empty", ""},
                  {"looks_nan", "NaN"},
                  {"looks_int", "123"},
                  {"looks_bool", "true"},
                  {"key \"with\" quotes/and\\slash", 1},
                  {"\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 2.5}};
  auto text = tune::to_json(m);
  INFO(text);
  auto back = tune::metrics_from_json(text, "test");
  REQUIRE(back.size() == m.size());
  for (auto& [k, v] : m) {
    INFO("key ", k);
    REQUIRE(back.count(k));
    auto& w = back.at(k);
    CHECK(w.get().index() == v.get().index()); // int, double, text as they were
    if (v.is_double() && std::isnan(v.as_double()))
      CHECK(std::isnan(w.as_double()));
    else
      CHECK(w == v);
  }
  CHECK(back.at("one").is_double());
  CHECK(std::signbit(back.at("neg_zero").as_double()));
  CHECK(back.at("inf").as_double() == inf);
  CHECK(back.at("neg_inf").as_double() == -inf);
  // Python's json spellings for the values JSON lacks.
  CHECK(text.find("NaN") != std::string::npos);
  CHECK(text.find("-Infinity") != std::string::npos);
  CHECK(tune::to_json({}) == "{}");
  CHECK(tune::metrics_from_json("{}", "test").empty());
}

TEST_CASE("tune: to_json and metrics_from_json keep subnormal doubles") {
  // BUG: tune/experiment.cpp value_of() reads reals with std::stod, which
  // throws std::out_of_range for a subnormal value (glibc's strtod sets
  // ERANGE), so "1e-310", which to_json wrote, comes back as
  // std::runtime_error "'1e-310' is not a number": a trial whose config or
  // result holds such a value makes result.json and experiment_state.json
  // unreadable (load_experiment, tuner::restore). Python's json reads it.
  for (double x : {1e-310, 5e-324, -2.5e-320}) {
    tune::metrics m{{"x", x}};
    INFO(tune::to_json(m));
    tune::metrics back;
    CHECK_NOTHROW(back = tune::metrics_from_json(tune::to_json(m), "test"));
    CHECK(back == m);
  }
}

TEST_CASE("tune: metrics_from_json refuses what is not a JSON object of scalars") {
  CHECK_THROWS_AS(tune::metrics_from_json("[1, 2]", "result.json"), std::runtime_error);
  CHECK_THROWS_AS(tune::metrics_from_json("{\"a\": [1]}", "result.json"), std::runtime_error);
  CHECK_THROWS_AS(tune::metrics_from_json("{\"a\": {\"b\": 1}}", "result.json"),
                  std::runtime_error);
  CHECK_THROWS_AS(tune::metrics_from_json("{\"a\": 12abc}", "result.json"), std::runtime_error);
  CHECK_THROWS_AS(tune::metrics_from_json("{\"a\": ", "result.json"), std::runtime_error);
  try {
    tune::metrics_from_json("{\"a\": bogus}", "my/result.json");
    FAIL("accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string{e.what()}.find("my/result.json") != std::string::npos);
  }
}

TEST_CASE("tune: save_experiment and load_experiment round-trip an experiment") {
  hvactor_test::temp_dir dir{"hvactor-tune-unit"};
  tune::experiment_record e;
  e.name = "exp \"one\" \xc3\xa9";
  e.metric = "loss";
  e.mode = "min";
  e.num_samples = 8;
  e.seed = std::numeric_limits<uint64_t>::max(); // a clock seed may use all 64 bits
  e.space = {{"lr", tune::loguniform(1e-4, 1e-1)},
             {"log2", tune::loguniform(1, 64, 2)},
             {"momentum", tune::uniform(0.1, 0.9)},
             {"batch", tune::grid_search({32, 64})},
             {"optimizer", "adam"},
             {"epochs", 10},
             {"dropout", 0.5},
             {"model",
              tune::param_space{
                {"layers", tune::randint(1, 5)},
                {"act", tune::choice({"relu", "tanh", "say \"x\""})},
                {"mix", tune::choice({1, 2.5, "three"})},
                {"inner",
                 tune::param_space{{"width", tune::quniform(16, 256, 16)},
                                   {"names", tune::grid_search({"a\\b", "c\nd", 1.5})},
                                   {"tag", "t\xe2\x82\xac"}}}}}};
  tune::trial_record a;
  a.trial_id = "trial_00000";
  a.config = {{"lr", 0.01}, {"model/layers", 3}, {"optimizer", "adam"}, {"one", 1.0}};
  a.status = tune::trial_status::terminated;
  a.checkpoint = "/results/exp/trial_00000/checkpoint_000003";
  a.checkpoint_iteration = 3;
  a.checkpoint_time = 12.5;
  a.iteration_offset = 2;
  a.time_offset = 7.25;
  a.stopped_early = true;
  a.num_workers = 2;
  a.cpus_per_worker = 4;
  tune::trial_record b;
  b.trial_id = "trial_00001";
  b.config = {{"lr", 1e-300}, {"nan", std::nan("")}, {"text", "q\"\\\n"}};
  b.status = tune::trial_status::error;
  b.error = "Traceback:\n  \"boom\"\tat C:\\x";
  e.trials = {a, b};

  tune::save_experiment(dir.path, e);
  REQUIRE(fs::exists(dir.path / tune::experiment_file));
  auto l = tune::load_experiment(dir.path);
  CHECK(l.name == e.name);
  CHECK(l.metric == e.metric);
  CHECK(l.mode == e.mode);
  CHECK(l.num_samples == e.num_samples);
  CHECK(l.seed == e.seed);
  check_same_space(e.space, l.space);
  REQUIRE(l.trials.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    auto& want = e.trials[i];
    auto& got = l.trials[i];
    INFO("trial ", want.trial_id);
    CHECK(got.trial_id == want.trial_id);
    CHECK(got.status == want.status);
    CHECK(got.checkpoint == want.checkpoint);
    CHECK(got.checkpoint_iteration == want.checkpoint_iteration);
    CHECK(got.checkpoint_time == want.checkpoint_time);
    CHECK(got.iteration_offset == want.iteration_offset);
    CHECK(got.time_offset == want.time_offset);
    CHECK(got.error == want.error);
    CHECK(got.stopped_early == want.stopped_early);
    CHECK(got.num_workers == want.num_workers);
    CHECK(got.cpus_per_worker == want.cpus_per_worker);
    REQUIRE(got.config.size() == want.config.size());
    for (auto& [k, v] : want.config) {
      INFO("config ", k);
      REQUIRE(got.config.count(k));
      CHECK(got.config.at(k).get().index() == v.get().index());
      if (v.is_double() && std::isnan(v.as_double()))
        CHECK(std::isnan(got.config.at(k).as_double()));
      else
        CHECK(got.config.at(k) == v);
    }
  }
  // The loaded space draws like the saved one: same seed, same configs.
  CHECK(variants(l.space, 3, 9) == variants(e.space, 3, 9));
  // Saving again replaces the file (no temporary left behind).
  e.trials.pop_back();
  tune::save_experiment(dir.path, e);
  CHECK(tune::load_experiment(dir.path).trials.size() == 1);
  size_t files = 0;
  for (auto& f : fs::directory_iterator(dir.path)) {
    (void)f;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("tune: load_experiment of a missing or garbage file names it") {
  hvactor_test::temp_dir dir{"hvactor-tune-unit"};
  auto message = [&]() -> std::string {
    try {
      (void)tune::load_experiment(dir.path);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(loaded)";
  };
  // Missing.
  auto msg = message();
  CHECK(msg.find(dir.path.string()) != std::string::npos);
  CHECK(msg.find(tune::experiment_file) != std::string::npos);

  auto file = dir.path / tune::experiment_file;
  auto write = [&](const std::string& text) {
    std::ofstream out{file, std::ios::trunc};
    out << text;
  };
  const std::vector<std::string> garbage_files{
    "{{{ not json",
    std::string("\x00\x01\x02 binary", 10),
    "[1, 2, 3]",
    "just words",
    "{\"version\": 1, \"trials\": []}",
    "{\"version\": 2, \"name\": \"x\", \"trials\": []}",
    ""};
  for (auto& garbage : garbage_files) {
    INFO("file: ", garbage);
    write(garbage);
    msg = message();
    CHECK(msg.find(file.string()) != std::string::npos);
  }
  // A file cut short half-way.
  tune::experiment_record e;
  e.name = "cut";
  e.space = mixed_space();
  tune::trial_record t;
  t.trial_id = "trial_00000";
  t.config = {{"lr", 0.01}};
  e.trials = {t, t};
  e.trials[1].trial_id = "trial_00001";
  tune::save_experiment(dir.path, e);
  std::ifstream in{file};
  std::string full{std::istreambuf_iterator<char>{in}, {}};
  write(full.substr(0, full.size() / 2));
  msg = message();
  CHECK(msg.find(file.string()) != std::string::npos);
  // A trial id that is not a directory name.
  auto at = full.find("trial_00001");
  REQUIRE(at != std::string::npos);
  write(full.substr(0, at) + "../escape" + full.substr(at + 11));
  msg = message();
  CHECK(msg.find(file.string()) != std::string::npos);
}

