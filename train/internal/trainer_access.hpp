#pragma once

// Internal: what hvactor::tune adds to a trainer's fit (tune/): a hook on
// every report that may stop the fit, a prefix for the workers' output and
// the experiment the run belongs to (the dashboard groups by it).

#include <functional>
#include <string>

#include "hvactor/train.hpp"

namespace hvactor::train {

struct trial_hooks {
  /// Called on the fit thread for each report: rank 0's metrics (with
  /// training_iteration, time_total_s, ...) and the report's persisted
  /// checkpoint directory ("" without one). Returning false stops the fit:
  /// its workers are shut down and fit() returns without an error.
  std::function<bool(const metrics&, const std::string& checkpoint_dir)> on_report;
  /// Worker output lines read "(<prefix> rank N) ..." instead of "(rank N) ...".
  std::string output_prefix;
  /// The tune experiment's name; empty for a plain fit.
  std::string experiment;
};

struct trainer_access {
  static void set_hooks(trainer& t, trial_hooks hooks);
  /// Whether the last fit() ended because on_report returned false.
  static bool stopped(const trainer& t);
};

} // namespace hvactor::train
