// hvactor::tune's restore: an experiment directory back into a tuner
// (finished trials kept, the others resumed from their latest checkpoints).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/internal/log.hpp"
#include "hvactor/errors.hpp"
#include "tune/internal/experiment.hpp"
#include "tune/internal/space.hpp"
#include "tune/internal/table.hpp"
#include "tune/internal/tuner_state.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace hvactor::tune {

tuner tuner::restore(const std::string& path, runtime& rt, trainer_factory factory,
                     tuner_options opts) {
  auto rec = load_experiment(path);
  auto dir = fs::absolute(fs::path{path}).lexically_normal();
  if (dir.filename().empty())
    dir = dir.parent_path();
  // The space the experiment was started with (saved with it).
  opts.param_space = rec.space;
  opts.run.name = dir.filename().string();
  opts.run.storage_path = dir.parent_path().string();
  opts.tune_config.metric = rec.metric;
  opts.tune_config.mode = rec.mode;
  opts.tune_config.num_samples = rec.num_samples;
  opts.tune_config.seed = rec.seed;
  auto p = std::make_unique<impl>(rt, std::move(factory), std::move(opts));
  p->restored = true;
  p->validate_and_set_up();
  for (auto& r : rec.trials)
    p->restore_trial(r);
  return tuner{std::move(p)};
}

void tuner::impl::restore_trial(const trial_record& r) {
  auto& t = trials.emplace_back();
  t.info.trial_id = r.trial_id;
  t.info.config = r.config;
  t.info.status = r.status;
  t.info.num_workers = r.num_workers;
  t.info.cpus_per_worker = r.cpus_per_worker;
  t.error = r.error;
  t.stopped_early = r.stopped_early;
  t.iteration_offset = r.iteration_offset;
  t.time_offset = r.time_offset;
  t.checkpoint_iteration = r.checkpoint_iteration;
  t.checkpoint_time = r.checkpoint_time;
  std::error_code ec;
  if (!r.checkpoint.empty() && fs::is_directory(r.checkpoint, ec))
    t.info.checkpoint = train::checkpoint::from_directory(r.checkpoint);
  // The results so far.
  std::ifstream in{dir / r.trial_id / "result.json"};
  size_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty())
      continue;
    try {
      t.history.push_back(metrics_from_json(
        line, fmt::format("{}/result.json line {}", r.trial_id, line_no)));
    } catch (const std::exception& e) {
      // A driver killed mid-write leaves half a line: the last one.
      log::warn("tune: {}", e.what());
      break;
    }
  }
  searcher->on_restored_trial(t.info.trial_id, t.info.config);
  sched->on_trial_add(t.info);
  bool finished = t.info.status == trial_status::terminated || t.info.status == trial_status::error;
  if (!finished) {
    // Back to its latest checkpoint: the results after it come again.
    int64_t keep_until = t.info.checkpoint ? t.checkpoint_iteration : 0;
    std::erase_if(t.history, [&](const metrics& m) {
      auto i = m.find("training_iteration");
      return i == m.end() || i->second.is_string() || i->second.as_int() > keep_until;
    });
    t.iteration_offset = keep_until;
    t.time_offset = t.info.checkpoint ? t.checkpoint_time : 0;
    t.resume = t.info.checkpoint;
    t.info.status = trial_status::pending;
    // fit() rewrites its result.json once it holds the experiment's lock.
    t.rewrite_results = true;
  }
  for (auto& m : t.history) {
    t.info.last_result = m;
    try {
      (void)sched->on_trial_result(t.info, m);
    } catch (const std::exception&) {
    }
  }
  if (t.info.status == trial_status::terminated) {
    sched->on_trial_complete(t.info, t.info.last_result);
    searcher->on_trial_complete(t.info.trial_id, t.info.last_result, false);
  } else if (t.info.status == trial_status::error) {
    sched->on_trial_error(t.info);
    searcher->on_trial_complete(t.info.trial_id, {}, true);
  } else {
    pending.push_back(&t);
  }
}

} // namespace hvactor::tune
