#include "config_file.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "horovod_flags.hpp"
#include "yaml_file.hpp"

namespace hvactor::run_tool {

namespace {

// Collects the words of the keys present, skipping flags given on the
// command line.
struct collector {
  tool::yaml_reader r;
  const std::function<bool(const std::string&)>& given;
  std::vector<std::string> words;

  void value(const std::string& flag, std::string v) {
    if (!given(flag))
      words.insert(words.end(), {"--" + flag, std::move(v)});
  }
  // A switch with a "no-" twin: either one on the command line wins.
  void toggle(const std::string& flag, bool on) {
    if (!given(flag) && !given("no-" + flag))
      words.push_back(on ? "--" + flag : "--no-" + flag);
  }
  void unsupported(const YAML::Node& section, const std::string& where, const std::string& key,
                   const std::string& why) {
    if (section[key])
      r.fail(where + "." + key, why);
  }
};

void params(collector& c, const YAML::Node& n) {
  auto& r = c.r;
  r.only(n, "params", {"fusion_threshold_mb", "cycle_time_ms", "cache_capacity",
                       "hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce"});
  c.unsupported(n, "params", "torus_allreduce",
                "horovodrun's NCCL torus allreduce has no hvactor counterpart (leave it out)");
  if (n["fusion_threshold_mb"])
    c.value("fusion-threshold-mb",
            std::to_string(r.number(n["fusion_threshold_mb"], "params.fusion_threshold_mb", 0,
                                    limits::fusion_threshold_mb)));
  if (n["cycle_time_ms"])
    c.value("cycle-time-ms", fmt::format("{}", r.real(n["cycle_time_ms"], "params.cycle_time_ms",
                                                      0, limits::cycle_time_ms)));
  if (n["cache_capacity"])
    c.value("cache-capacity",
            std::to_string(r.number(n["cache_capacity"], "params.cache_capacity", 0,
                                    limits::cache_capacity)));
  for (auto* key : {"hierarchical_allreduce", "hierarchical_allgather"})
    if (n[key]) {
      std::string flag = key;
      flag[12] = '-';
      c.toggle(flag, r.flag(n[key], std::string{"params."} + key));
    }
}

void autotune(collector& c, const YAML::Node& n) {
  auto& r = c.r;
  r.only(n, "autotune", {"enabled", "log_file", "warmup_samples", "steps_per_sample",
                         "bayes_opt_max_samples", "gaussian_process_noise"});
  bool on = n["enabled"] && r.flag(n["enabled"], "autotune.enabled");
  if (n["enabled"])
    c.toggle("autotune", on);
  std::vector<std::string> knobs;
  if (n["log_file"]) {
    c.value("autotune-log-file", r.text(n["log_file"], "autotune.log_file"));
    knobs.push_back("log_file");
  }
  const std::pair<std::string, int> counts[] = {
    {"warmup_samples", limits::autotune_warmup_samples},
    {"steps_per_sample", limits::autotune_steps_per_sample},
    {"bayes_opt_max_samples", limits::autotune_bayes_opt_max_samples}};
  for (auto& [key, max] : counts)
    if (n[key]) {
      auto flag = "autotune-" + key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      c.value(flag, std::to_string(r.number(n[key], "autotune." + key, 0, max)));
      knobs.push_back(key);
    }
  if (n["gaussian_process_noise"]) {
    c.value("autotune-gaussian-process-noise",
            fmt::format("{}", r.real(n["gaussian_process_noise"],
                                     "autotune.gaussian_process_noise", 0, 1)));
    knobs.push_back("gaussian_process_noise");
  }
  // As --autotune-* without --autotune, named here rather than by a flag
  // the user never gave.
  if (!knobs.empty() && !on && !c.given("autotune"))
    r.fail("autotune." + knobs.front(),
           "shapes autotune: set autotune.enabled: true (or give --autotune)");
}

void timeline(collector& c, const YAML::Node& n) {
  c.r.only(n, "timeline", {"filename", "mark_cycles"});
  if (n["filename"])
    c.value("timeline-filename", c.r.text(n["filename"], "timeline.filename"));
  if (n["mark_cycles"] && c.r.flag(n["mark_cycles"], "timeline.mark_cycles") &&
      !c.given("timeline-mark-cycles")) {
    if (!n["filename"] && !c.given("timeline-filename") && !c.given("timeline"))
      c.r.fail("timeline.mark_cycles", "marks cycles in the timeline: set timeline.filename "
                                       "too (or give --timeline-filename)");
    c.words.push_back("--timeline-mark-cycles");
  }
}

void stall_check(collector& c, const YAML::Node& n) {
  auto& r = c.r;
  r.only(n, "stall_check", {"enabled", "warning_time_seconds", "shutdown_time_seconds"});
  if (n["enabled"] && !r.flag(n["enabled"], "stall_check.enabled") && !c.given("no-stall-check"))
    c.words.push_back("--no-stall-check");
  if (n["warning_time_seconds"])
    c.value("stall-check-warning-time-seconds",
            std::to_string(r.number(n["warning_time_seconds"], "stall_check.warning_time_seconds",
                                    1, 1 << 30)));
  if (n["shutdown_time_seconds"])
    c.value("stall-check-shutdown-time-seconds",
            std::to_string(r.number(n["shutdown_time_seconds"],
                                    "stall_check.shutdown_time_seconds", 0, 1 << 30)));
}

void library_options(collector& c, const YAML::Node& n) {
  auto& r = c.r;
  r.only(n, "library_options", {"gloo_timeout_seconds", "thread_affinity", "mpi_threads_disable",
                                "num_nccl_streams"});
  c.unsupported(n, "library_options", "mpi_threads_disable", "hvactor does not use MPI");
  c.unsupported(n, "library_options", "num_nccl_streams",
                "hvactor's NCCL path uses one stream per rank (leave it out)");
  if (n["gloo_timeout_seconds"])
    c.value("gloo-timeout-seconds",
            std::to_string(r.number(n["gloo_timeout_seconds"], "library_options.gloo_timeout_seconds",
                                    1, limits::gloo_timeout_seconds)));
  if (n["thread_affinity"])
    c.value("thread-affinity",
            std::to_string(r.number(n["thread_affinity"], "library_options.thread_affinity", 0,
                                    limits::thread_affinity)));
}

void logging(collector& c, const YAML::Node& n) {
  c.r.only(n, "logging", {"level", "with_timestamp"});
  c.unsupported(n, "logging", "with_timestamp",
                "hvactor's log lines carry no timestamps; hvactor-run --timestamps stamps the "
                "ranks' output lines");
  if (n["level"])
    c.value("log-level", c.r.text(n["level"], "logging.level"));
}

std::vector<std::string> words_of(const std::string& path, const YAML::Node& doc,
                                  const std::function<bool(const std::string&)>& given) {
  collector c{tool::yaml_reader{path}, given, {}};
  if (!doc || doc.IsNull())
    return {};
  c.r.only(doc, "", {"controller", "params", "autotune", "timeline", "stall_check",
                     "library_options", "logging"});
  if (doc["controller"]) {
    auto controller = c.r.text(doc["controller"], "controller");
    if (controller != "gloo" && controller != "Gloo")
      c.r.fail("controller", fmt::format("'{}': hvactor's controller is Gloo (over its rendezvous "
                                         "store); leave the key out or say gloo",
                                         controller));
  }
  if (auto n = doc["autotune"])
    autotune(c, n);
  if (auto n = doc["params"])
    params(c, n);
  if (auto n = doc["timeline"])
    timeline(c, n);
  if (auto n = doc["stall_check"])
    stall_check(c, n);
  if (auto n = doc["library_options"])
    library_options(c, n);
  if (auto n = doc["logging"])
    logging(c, n);
  return c.words;
}

} // namespace

std::vector<std::string> config_file_words(const std::string& path,
                                           const std::function<bool(const std::string&)>& given) {
  auto doc = tool::load_yaml_file(path, "the config file");
  try {
    return words_of(path, doc, given);
  } catch (const YAML::Exception& e) {
    // A shape the readers above did not foresee: still the file's error.
    throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
}

} // namespace hvactor::run_tool
