#pragma once

// Internal: the experiment directory (Ray's layout). experiment_state.json
// holds every trial's config, status and latest checkpoint (written
// atomically after every change); each trial's directory holds
// params.json, result.json (one JSON object per result) and the
// trainer's checkpoints and TensorBoard file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hvactor/tune.hpp"

namespace hvactor::tune {

/// A trial as experiment_state.json keeps it.
struct trial_record {
  std::string trial_id;
  tune::config config;
  trial_status status = trial_status::pending;
  std::string checkpoint;
  int64_t checkpoint_iteration = 0;
  double checkpoint_time = 0;
  int64_t iteration_offset = 0;
  double time_offset = 0;
  std::string error;
  bool stopped_early = false;
  int num_workers = 1;
  int cpus_per_worker = 1;
};

struct experiment_record {
  std::string name;
  std::string metric, mode;
  int64_t num_samples = 1;
  uint64_t seed = 0;
  /// The search space, so that a restore draws the trials still to come.
  tune::param_space space;
  std::vector<trial_record> trials;
};

/// `m` as one JSON object: integers plainly, reals with a '.', NaN and
/// +-Infinity as Python's json writes them, texts quoted.
std::string to_json(const metrics& m);

/// Parses what to_json wrote (a JSON object of scalars); std::runtime_error
/// naming `what` for anything else.
metrics metrics_from_json(const std::string& text, const std::string& what);

/// Writes `text` to `path` through a temporary file and rename (a reader
/// sees the old or the new file, never half of one); hvactor::error.
void write_atomically(const std::filesystem::path& path, const std::string& text);

void save_experiment(const std::filesystem::path& dir, const experiment_record& e);
/// std::invalid_argument naming the file when `dir` holds no readable
/// experiment_state.json.
experiment_record load_experiment(const std::filesystem::path& dir);

constexpr const char* experiment_file = "experiment_state.json";

} // namespace hvactor::tune
