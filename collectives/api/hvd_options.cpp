// hvd::init's settings from the environment (internal/hvd_options.hpp).

#include "collectives/api/hvd_options.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "base/internal/knobs_collectives.hpp"

namespace hvactor::hvd::detail {

using collectives::topology;

std::string machine_hostname() {
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

topology topology_from_env() {
  topology t;
  t.rank = env::get_int(env::rank, 0);
  t.size = env::get_int(env::size, 1);
  t.local_rank = env::get_int(env::local_rank, t.rank);
  t.local_size = env::get_int(env::local_size, t.size);
  t.cross_rank = env::get_int(env::cross_rank, 0);
  t.cross_size = env::get_int(env::cross_size, 1);
  t.host = env::get(env::hostname).value_or(machine_hostname());
  if (t.size < 1 || t.rank < 0 || t.rank >= t.size)
    throw std::invalid_argument(fmt::format("hvd::init: {}={} and {}={} are not a valid rank and "
                                            "size",
                                            env::rank, t.rank, env::size, t.size));
  return t;
}

namespace {

// HOROVOD_GLOO_TIMEOUT_SECONDS: whole seconds > 0, like every other
// timeout (a rendezvous within 0 s cannot succeed; 0 used to fail "within
// 0 ms" at once). Anything else fails init on every rank, naming it.
std::chrono::milliseconds gloo_timeout_from_env() {
  auto text = env::get(env::gloo_timeout_seconds);
  if (!text)
    return std::chrono::seconds{knobs::default_gloo_timeout_seconds};
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), seconds);
  if (ec != std::errc{} || end != text->data() + text->size() || seconds < 1
      || seconds > knobs::max_gloo_timeout_seconds)
    throw std::invalid_argument(fmt::format(
      "hvd::init: {}='{}' must be a whole number of seconds > 0 and <= {} (the timeout of the "
      "rendezvous and of every collective; default {})",
      env::gloo_timeout_seconds, *text, knobs::max_gloo_timeout_seconds,
      knobs::default_gloo_timeout_seconds));
  return std::chrono::seconds{seconds};
}

// A whole number of seconds in [0, max] from `name`, or `fallback` when
// unset; anything else fails init naming the variable.
std::chrono::seconds seconds_from_env(const char* name, int64_t fallback, const char* what) {
  auto text = env::get(name);
  if (!text)
    return std::chrono::seconds{fallback};
  int64_t seconds = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), seconds);
  if (ec != std::errc{} || end != text->data() + text->size() || seconds < 0
      || seconds > knobs::max_gloo_timeout_seconds)
    throw std::invalid_argument(fmt::format(
      "hvd::init: {}='{}' must be a whole number of seconds from 0 to {} ({}; default {})", name,
      *text, knobs::max_gloo_timeout_seconds, what, fallback));
  return std::chrono::seconds{seconds};
}

// Horovod's stall inspector knobs.
collectives::stall_settings stall_settings_from_env() {
  collectives::stall_settings s;
  if (auto v = env::get(env::stall_check_disable)) {
    if (*v != "0" && *v != "1")
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be 1 (no stall warnings or shutdowns) or 0", env::stall_check_disable, *v));
    s.disabled = *v == "1";
  }
  s.warning = seconds_from_env(env::stall_check_time_seconds, 60,
                               "how long a collective waits for other ranks before a warning");
  s.shutdown = seconds_from_env(env::stall_shutdown_time_seconds, 0,
                                "how long a collective waits before every rank fails; 0: never");
  if (s.warning.count() == 0)
    throw std::invalid_argument(fmt::format(
      "hvd::init: {}=0: warn after at least 1 s, or set {}=1", env::stall_check_time_seconds,
      env::stall_check_disable));
  return s;
}

// A whole number in [0, max] from `name`, or `fallback` when unset.
int count_from_env(const char* name, int fallback, int max, const char* what) {
  auto text = env::get(name);
  if (!text)
    return fallback;
  int n = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), n);
  if (ec != std::errc{} || end != text->data() + text->size() || n < 0 || n > max)
    throw std::invalid_argument(fmt::format(
      "hvd::init: {}='{}' must be a whole number from 0 to {} ({}; default {})", name, *text, max,
      what, fallback));
  return n;
}

// Horovod's autotune knobs (its defaults and bounds).
collectives::autotune_settings autotune_from_env() {
  collectives::autotune_settings s;
  if (auto v = env::get(env::autotune)) {
    if (*v != "0" && *v != "1")
      throw std::invalid_argument(
        fmt::format("hvd::init: {}='{}' must be 1 (tune) or 0", env::autotune, *v));
    s.enabled = *v == "1";
  }
  s.log_file = env::get(env::autotune_log).value_or("");
  s.warmup_samples = count_from_env(env::autotune_warmup_samples, s.warmup_samples, 1000,
                                    "scores thrown away before tuning");
  s.steps_per_sample = count_from_env(env::autotune_steps_per_sample, s.steps_per_sample, 100000,
                                      "steps per sample");
  s.bayes_opt_max_samples = count_from_env(env::autotune_bayes_opt_max_samples,
                                           s.bayes_opt_max_samples, 1000,
                                           "points of the Bayesian optimisation");
  if (auto v = env::get(env::autotune_gaussian_process_noise)) {
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (v->empty() || end != v->c_str() + v->size() || !(x >= 0 && x <= 1))
      throw std::invalid_argument(fmt::format("hvd::init: {}='{}' must be in [0, 1]",
                                              env::autotune_gaussian_process_noise, *v));
    s.gaussian_process_noise = x;
  }
  // Horovod's: a knob set in the environment stays as set while the others
  // are tuned; hvactor's HVACTOR_AUTOTUNE_SET_KNOBS=start tunes it from there.
  auto set = [](const char* name) { return env::get(name).has_value(); };
  s.fusion_threshold_set = set(env::fusion_threshold);
  s.cycle_time_set = set(env::cycle_time);
  s.hierarchical_allreduce_set = !env::get(env::hierarchical_allreduce).value_or("").empty();
  s.hierarchical_allgather_set = !env::get(env::hierarchical_allgather).value_or("").empty();
  if (auto v = env::get(env::autotune_set_knobs)) {
    if (*v != "fixed" && *v != "start")
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be fixed (a knob set explicitly stays as set while autotune "
        "tunes the others, Horovod's; the default) or start (tuning starts from it and tunes it)",
        env::autotune_set_knobs, *v));
    s.start_from_set = *v == "start";
  }
  return s;
}

// Bounds of the fusion knobs: a fusion buffer of this size is allocated, and
// a cycle longer than this delays every batch by that much.
constexpr uint64_t max_fusion_threshold = uint64_t{16} << 30;
constexpr double max_cycle_time_ms = 10000;

} // namespace

// The engine's and Gloo's knobs (named in base/internal/env_names.hpp), read once at
// hvd::init; nothing reads them per call.
engine_options engine_options_from_env() {
  engine_options opts;
  // Horovod's units: bytes (0: no fusion) and milliseconds (a fraction is
  // fine). Text, negatives and absurd sizes fail init naming the variable
  // (they became 0, silently).
  if (auto v = env::get(env::fusion_threshold)) {
    uint64_t bytes = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), bytes);
    if (ec != std::errc{} || end != v->data() + v->size() || bytes > max_fusion_threshold)
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be a whole number of bytes from 0 (no fusion) to {}",
        env::fusion_threshold, *v, max_fusion_threshold));
    opts.fusion_threshold = bytes;
  }
  if (auto v = env::get(env::cycle_time)) {
    char* end = nullptr;
    double ms = std::strtod(v->c_str(), &end);
    if (v->empty() || end != v->c_str() + v->size() || !(ms >= 0 && ms <= max_cycle_time_ms))
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be milliseconds from 0 to {} (e.g. 1 or 0.5)", env::cycle_time,
        *v, max_cycle_time_ms));
    opts.cycle_time = std::chrono::microseconds{static_cast<int64_t>(ms * 1000.0)};
  }
  if (auto v = env::get(env::cache_capacity)) {
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc{} || end != v->data() + v->size() || n > knobs::max_cache_capacity)
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be a whole number of names from 0 (no response cache) to {}",
        env::cache_capacity, *v, knobs::max_cache_capacity));
    opts.cache_capacity = n;
  }
  opts.timeout = gloo_timeout_from_env();
  opts.stall = stall_settings_from_env();
  // Validated here, so that a typo fails init on every rank before it
  // connects instead of silently taking the automatic choice.
  opts.gloo_allreduce = collectives::allreduce_algorithm_policy::parse(
    env::get(env::gloo_allreduce).value_or(""), env::gloo_allreduce);
  if (auto v = env::get(env::timeline_mark_cycles)) {
    if (*v != "0" && *v != "1")
      throw std::invalid_argument(fmt::format(
        "hvd::init: {}='{}' must be 1 (mark every negotiation cycle in the timeline) or 0",
        env::timeline_mark_cycles, *v));
    opts.timeline_mark_cycles = *v == "1";
  }
  opts.autotune = autotune_from_env();
  opts.paths.shm = env::get(env::shm).value_or("1") != "0";
  opts.paths.hierarchical_allreduce = collectives::path_settings::parse_switch(
    env::get(env::hierarchical_allreduce).value_or(""), env::hierarchical_allreduce);
  opts.paths.hierarchical_allgather = collectives::path_settings::parse_switch(
    env::get(env::hierarchical_allgather).value_or(""), env::hierarchical_allgather);
  return opts;
}

} // namespace hvactor::hvd::detail
