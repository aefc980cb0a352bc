// hvactor::tune's trials while they run: each fit on a thread of its own,
// every result to the searcher, the scheduler and the trial's
// result.json, the scheduler's decision carried out (stop, or restart from
// another trial's checkpoint), the experiment state and progress table
// kept current.

#include <unistd.h>

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
#include "train/internal/trainer_access.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace hvactor::tune {
#include "train/internal/trainer_access.hpp"

void tuner::impl::run_trial(trial& t, train::trainer_options o) {
  train::result res;
  bool stopped = false, have_result = false;
  std::string error_text;
  try {
    train::trainer tr{rt, factory.loop(), std::move(o)};
    train::trial_hooks hooks;
    hooks.on_report = [this, &t](const metrics& m, const std::string& ckpt) {
      return on_report(t, m, ckpt);
    };
    hooks.output_prefix = t.info.trial_id;
    hooks.experiment = opts.run.name;
    train::trainer_access::set_hooks(tr, std::move(hooks));
    res = tr.fit();
    have_result = true;
    stopped = train::trainer_access::stopped(tr);
    if (res.error)
      error_text = res.error_message();
  } catch (const std::exception& e) {
    error_text = e.what();
  }
  // A PBT exploit: the donor's checkpoint, copied before the donor's
  // num_to_keep can remove it.
  std::optional<train::checkpoint> copied;
  std::optional<decision> restart;
  {
    std::lock_guard<std::mutex> guard{mu};
    restart = t.restart;
  }
  if (restart && error_text.empty()) {
    auto to = dir / t.info.trial_id / fmt::format("exploit_{:04d}", t.restarts + 1);
    std::error_code ec;
    fs::remove_all(to, ec);
    fs::copy(restart->checkpoint.path(), to, fs::copy_options::recursive, ec);
    if (ec)
      log::warn("tune: {} cannot copy the checkpoint '{}' to exploit it ({}); it goes on from "
                "its own",
                t.info.trial_id, restart->checkpoint.path(), ec.message());
    else
      copied = train::checkpoint::from_directory(to.string());
  }
  std::lock_guard<std::mutex> guard{mu};
  if (t.restart && copied) {
    auto d = *t.restart;
    t.restart.reset();
    t.info.config = d.config;
    t.iteration_offset = d.iteration;
    t.time_offset = d.time_total_s;
    t.checkpoint_iteration = d.iteration;
    t.checkpoint_time = d.time_total_s;
    t.resume = *copied;
    t.info.checkpoint = *copied;
    ++t.restarts;
    t.plan.reset();
    t.info.status = trial_status::pending;
    t.spans.back().second = unix_now();
    write_params(t);
    adopt_result(t, d);
    pending.push_front(&t);
    note(fmt::format("{} exploits {} with {}", t.info.trial_id,
                     fs::path{d.checkpoint.path()}.parent_path().filename().string(),
                     to_json(t.info.config)));
  } else if (t.restart && error_text.empty()) {
    // The copy failed: on from its own latest checkpoint, config unchanged.
    t.restart.reset();
    t.resume = t.info.checkpoint;
    t.iteration_offset = t.checkpoint_iteration;
    t.time_offset = t.checkpoint_time;
    t.plan.reset();
    t.info.status = trial_status::pending;
    t.spans.back().second = unix_now();
    pending.push_front(&t);
  } else {
    finish(t, have_result ? &res : nullptr, stopped, error_text);
  }
  t.thread_done = true;
  state_dirty = true;
  changed.notify_all();
}

// An exploit: the trial now holds the donor's weights, so the donor's
// result at that checkpoint is its latest (a donor at the end of its
// budget leaves the restarted loop nothing to report).
void tuner::impl::adopt_result(trial& t, const decision& d) {
  if (d.checkpoint_result.empty())
    return;
  auto r = d.checkpoint_result;
  r["trial_id"] = t.info.trial_id;
  r["training_iteration"] = d.iteration;
  r["time_total_s"] = d.time_total_s;
  r["timestamp"] = static_cast<int64_t>(unix_now());
  t.history.push_back(r);
  t.info.last_result = r;
  try {
    append_result(t, r);
  } catch (const std::exception& e) {
    log::warn("tune: {}", e.what());
  }
}

bool tuner::impl::on_report(trial& t, const metrics& m, const std::string& checkpoint_dir) {
  std::lock_guard<std::mutex> guard{mu};
  auto r = m;
  auto it = m.find("training_iteration");
  auto iter = t.iteration_offset + (it != m.end() ? it->second.as_int() : 0);
  auto tt = m.find("time_total_s");
  auto time_total = t.time_offset + (tt != m.end() ? tt->second.as_double() : 0.0);
  r["training_iteration"] = iter;
  r["time_total_s"] = time_total;
  r["trial_id"] = t.info.trial_id;
  r["timestamp"] = static_cast<int64_t>(unix_now());
  if (!checkpoint_dir.empty()) {
    t.info.checkpoint = train::checkpoint::from_directory(checkpoint_dir);
    t.checkpoint_iteration = iter;
    t.checkpoint_time = time_total;
    state_dirty = true;
  }
  t.history.push_back(r);
  t.info.last_result = r;
  if (!metric.empty() && !m.count(metric) && fatal.empty()) {
    // Ray's strict metric check: the first such result ends the experiment.
    std::string names;
    for (auto& [k, v] : m)
      names += (names.empty() ? "" : ", ") + k;
    fatal = fmt::format("{} returned a result without the metric '{}' that tune_config.metric "
                        "names; it reported: {}",
                        t.info.trial_id, metric, names);
    fatal_is_input = true;
  }
  try {
    append_result(t, r);
    if (!checkpoint_dir.empty())
      save_state(); // a restore resumes from here
  } catch (const std::exception& e) {
    if (fatal.empty())
      fatal = e.what();
  }
  decision d;
  try {
    searcher->on_trial_result(t.info.trial_id, r);
    d = sched->on_trial_result(t.info, r);
  } catch (const std::exception& e) {
    log::warn("tune: the scheduler failed on a result of {}: {}", t.info.trial_id, e.what());
  }
  changed.notify_all();
  if (!fatal.empty())
    return false;
  switch (d.kind) {
    case decision::stop_trial:
      t.stopped_early = d.early;
      note(fmt::format("{} stopped by the scheduler at iteration {}", t.info.trial_id, iter));
      return false;
    case decision::restart_trial:
      t.restart = d;
      return false;
    default:
      return true;
  }
}

void tuner::impl::finish(trial& t, const train::result* res, bool stopped,
                         const std::string& error) {
  t.plan.reset();
  t.spans.back().second = unix_now();
  (void)res;
  if (!error.empty() && !stopped) {
    t.info.status = trial_status::error;
    t.error = error;
    std::error_code ec;
    fs::create_directories(dir / t.info.trial_id, ec);
    std::ofstream{dir / t.info.trial_id / "error.txt"} << error << "\n";
    sched->on_trial_error(t.info);
    searcher->on_trial_complete(t.info.trial_id, {}, true);
    note(fmt::format("{} failed: {}", t.info.trial_id, error));
    return;
  }
  t.info.status = trial_status::terminated;
  if (!t.history.empty())
    t.history.back()["done"] = true;
  sched->on_trial_complete(t.info, t.info.last_result);
  searcher->on_trial_complete(t.info.trial_id, t.info.last_result, false);
  note(fmt::format("{} {}", t.info.trial_id, t.stopped_early ? "stopped early" : "completed"));
}

// -- files -------------------------------------------------------------------------

void tuner::impl::write_params(const trial& t) {
  write_atomically(dir / t.info.trial_id / "params.json", to_json(t.info.config) + "\n");
}

void tuner::impl::append_result(const trial& t, const metrics& r) {
  std::ofstream out{dir / t.info.trial_id / "result.json", std::ios::app};
  out << to_json(r) << "\n";
  if (!out.flush())
    throw error(fmt::format("tune: cannot write '{}'",
                            (dir / t.info.trial_id / "result.json").string()));
}

void tuner::impl::save_state() {
  experiment_record e;
  e.name = opts.run.name;
  e.metric = metric;
  e.mode = mode;
  e.num_samples = opts.tune_config.num_samples;
  e.seed = seed;
  e.space = opts.param_space;
  for (auto& t : trials) {
    trial_record r;
    r.trial_id = t.info.trial_id;
    r.config = t.info.config;
    r.status = t.info.status;
    r.checkpoint = t.info.checkpoint.path();
    r.checkpoint_iteration = t.checkpoint_iteration;
    r.checkpoint_time = t.checkpoint_time;
    r.iteration_offset = t.iteration_offset;
    r.time_offset = t.time_offset;
    r.error = t.error;
    r.stopped_early = t.stopped_early;
    r.num_workers = t.info.num_workers;
    r.cpus_per_worker = t.info.cpus_per_worker;
    e.trials.push_back(std::move(r));
  }
  save_experiment(dir, e);
  state_dirty = false;
}

// -- progress ----------------------------------------------------------------------

std::string tuner::impl::table_text() const {
  std::vector<std::string> config_cols;
  for (auto& l : flatten(opts.param_space))
    if (!std::holds_alternative<value>(l.p->get()))
      config_cols.push_back(l.path);
  std::vector<std::string> head{"Trial name", "status"};
  head.insert(head.end(), config_cols.begin(), config_cols.end());
  head.push_back("iter");
  head.push_back("total time (s)");
  if (!metric.empty())
    head.push_back(metric);
  std::vector<std::vector<std::string>> rows;
  for (auto& t : trials) {
    std::vector<std::string> row{t.info.trial_id, to_string(t.info.status)};
    for (auto& c : config_cols) {
      auto i = t.info.config.find(c);
      row.push_back(i == t.info.config.end() ? "" : i->second.to_string());
    }
    auto& last = t.info.last_result;
    auto get = [&](const std::string& k) {
      auto i = last.find(k);
      return i == last.end() ? std::string{} : i->second.to_string();
    };
    row.push_back(get("training_iteration"));
    auto tt = last.find("time_total_s");
    row.push_back(tt == last.end() ? "" : fmt::format("{:.2f}", tt->second.as_double()));
    if (!metric.empty())
      row.push_back(get(metric));
    rows.push_back(std::move(row));
  }
  return format_table(head, rows);
}

void tuner::impl::print_table(bool last) {
  if (opts.run.verbose < 1)
    return;
  int counts[4] = {0, 0, 0, 0};
  int cpus_used = 0, cpus = 0;
  for (auto& t : trials) {
    ++counts[static_cast<int>(t.info.status)];
    if (t.info.status == trial_status::running)
      cpus_used += t.info.num_workers * t.info.cpus_per_worker;
  }
  for (auto& n : totals)
    cpus += n.total_cpus;
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::string status;
  for (auto s : {trial_status::pending, trial_status::running, trial_status::terminated,
                 trial_status::error})
    if (counts[static_cast<int>(s)])
      status += fmt::format("{}{} {}", status.empty() ? "" : ", ", counts[static_cast<int>(s)],
                            to_string(s));
  auto t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char now[32];
  std::strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S", &tm);
  auto text = fmt::format(
    "== Status ==\nCurrent time: {} (running for {:02d}:{:02d}:{:05.2f})\n{}\n"
    "Logical resource usage: {}/{} CPUs\nResult logdir: {}\nNumber of trials: {}{} ({})\n{}",
    now, static_cast<int>(secs) / 3600, static_cast<int>(secs) / 60 % 60, std::fmod(secs, 60.0),
    sched->debug_string(), cpus_used, cpus, dir.string(), trials.size(),
    total >= 0 ? "/" + std::to_string(total) : "", status, table_text());
  std::fprintf(stdout, "%s%s\n", text.c_str(), last ? "" : "");
  std::fflush(stdout);
  last_table = std::chrono::steady_clock::now();
}

} // namespace hvactor::tune
