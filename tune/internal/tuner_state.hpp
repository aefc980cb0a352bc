#pragma once

// Internal: the tuner's state (tuner.cpp packs and starts trials,
// tuner_trials.cpp follows them, tuner_restore.cpp rebuilds the state
// from an experiment directory, result_grid.cpp reads the results).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/placement/placement.hpp"
#include "hvactor/tune.hpp"
#include "tune/internal/experiment.hpp"

namespace hvactor::tune {

/// Seconds since the Unix epoch.
double unix_now();

// -- one trial ---------------------------------------------------------------------

struct trial {
  trial_info info;
  std::vector<metrics> history;
  int64_t iteration_offset = 0;
  double time_offset = 0;
  int64_t checkpoint_iteration = 0;
  double checkpoint_time = 0;
  /// Where its next fit starts (its latest checkpoint, or a PBT donor's copy).
  train::checkpoint resume;
  std::string error;
  bool stopped_early = false;
  /// Times a later trial started while it waited.
  int bypassed = 0;
  /// A PBT exploit waiting for the fit to end.
  std::optional<decision> restart;
  std::optional<placement_plan> plan;
  std::thread thread;
  bool thread_done = false;
  std::vector<std::pair<double, double>> spans;
  int restarts = 0;
  /// Restored with results past its checkpoint: result.json is cut back.
  bool rewrite_results = false;
};

struct tuner::impl {
  runtime& rt;
  trainer_factory factory;
  tuner_options opts;
  std::filesystem::path dir;
  std::string metric, mode;
  uint64_t seed = 0;
  std::shared_ptr<search_alg> searcher;
  std::shared_ptr<tune::scheduler> sched;
  /// Trials the searcher will create in all (-1: until it says none).
  int64_t total = -1;
  bool restored = false;

  std::mutex mu;
  std::condition_variable changed;
  std::list<trial> trials; // stable addresses; creation order
  std::deque<trial*> pending;
  bool searcher_done = false;
  bool state_dirty = true;
  std::string fatal; // a problem that ends the experiment (state not writable)
  bool fatal_is_input = false; // ... that is the user's (a metric never reported)

  std::vector<node_resources> totals;
  std::chrono::steady_clock::time_point view_at;
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point last_table;

  impl(runtime& r, trainer_factory f, tuner_options o)
      : rt(r), factory(std::move(f)), opts(std::move(o)) {
  }

  void validate_and_set_up();
  result_grid run();
  int take_experiment();
  result_grid results() const;
  /// Schedules until every trial ended (or a fatal problem); under `lock`.
  void run_loop(std::unique_lock<std::mutex>& lock);
  /// restore(): one trial of the saved experiment.
  void restore_trial(const trial_record& r);

  // Under mu.
  void create_trials();
  trial& add_trial(const std::string& id, config cfg);
  void schedule();
  void start(trial& t);
  bool fits(const trial_info& t, const std::vector<node_resources>& view) const;
  std::vector<node_resources> free_view() const;
  void refresh_view();
  void save_state();
  void write_params(const trial& t);
  void append_result(const trial& t, const metrics& r);
  bool on_report(trial& t, const metrics& m, const std::string& checkpoint_dir);
  void adopt_result(trial& t, const decision& d);
  void finish(trial& t, const train::result* res, bool stopped, const std::string& error);
  void print_table(bool last);
  std::string table_text() const;
  int running() const;
  void note(const std::string& text) const;

  // On the trial's thread.
  void run_trial(trial& t, train::trainer_options o);
};

} // namespace hvactor::tune
