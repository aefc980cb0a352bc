// hvactor::tune's tuner: creates trials from the search algorithm, packs
// their gangs onto the cluster (a trial starts as soon as its gang fits;
// a smaller one may pass a bigger one that does not fit yet, a bounded
// number of times), runs each as an hvactor::train fit on a thread of its
// own, hands every result to the scheduler and acts on its decision, and
// keeps the experiment directory current (internal/experiment.hpp).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <list>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "actors/placement/placement.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/log.hpp"
#include "driver/internal/runtime_access.hpp"
#include "hvactor/errors.hpp"
#include "train/internal/trainer_access.hpp"
#include "tune/internal/experiment.hpp"
#include "tune/internal/space.hpp"
#include "tune/internal/table.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace hvactor::tune {

namespace {

/// A pending trial that later trials passed this many times blocks the
/// queue until it starts (no starvation).
constexpr int max_bypass = 4;
/// Pending trials the default searcher creates ahead (the cluster's gangs
/// are matched against them); an adaptive searcher gets one at a time.
constexpr size_t pending_ahead = 16;
/// How old the cluster's resource view may get before a scheduling pass
/// asks the registry again.
constexpr auto view_refresh = 1s;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string default_name() {
  auto t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "hvactor_tune_%Y-%m-%d_%H-%M-%S", &tm);
  return buf;
}

std::string default_storage() {
  const char* home = std::getenv("HOME");
  return (home && *home ? fs::path{home} : fs::temp_directory_path()) / "hvactor_results";
}

std::string trial_name(size_t index) {
  return fmt::format("trial_{:05d}", index);
}

placement_request request_of(const trial_info& t) {
  placement_request r;
  r.num_workers = t.num_workers;
  r.cpus_per_worker = t.cpus_per_worker;
  return r;
}

} // namespace

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
};

struct tuner::impl {
  runtime& rt;
  trainer_factory factory;
  tuner_options opts;
  fs::path dir;
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
  void finish(trial& t, const train::result* res, bool stopped, const std::string& error);
  void print_table(bool last);
  std::string table_text() const;
  int running() const;
  void note(const std::string& text) const;

  // On the trial's thread.
  void run_trial(trial& t, train::trainer_options o);
};

int tuner::impl::running() const {
  int n = 0;
  for (auto& t : trials)
    n += t.info.status == trial_status::running;
  return n;
}

void tuner::impl::note(const std::string& text) const {
  if (opts.run.verbose >= 2) {
    std::fprintf(stdout, "[%s] %s\n", opts.run.name.c_str(), text.c_str());
    std::fflush(stdout);
  }
}

void tuner::impl::validate_and_set_up() {
  auto& tc = opts.tune_config;
  metric = tc.metric;
  mode = tc.mode;
  if (metric.empty() != mode.empty())
    throw std::invalid_argument(fmt::format(
      "tune_config: give both metric and mode, or neither: Got metric '{}' and mode '{}'.",
      metric, mode));
  if (!mode.empty() && mode != "min" && mode != "max")
    throw std::invalid_argument(
      fmt::format("tune_config.mode must be 'min' or 'max': Got '{}'.", mode));
  if (tc.num_samples == 0 || tc.num_samples < -1)
    throw std::invalid_argument(fmt::format(
      "tune_config.num_samples must be >= 1, or -1 (until the searcher ends): Got {}.",
      tc.num_samples));
  if (tc.max_concurrent_trials < 0)
    throw std::invalid_argument(fmt::format("tune_config.max_concurrent_trials must be >= 0 "
                                            "(0: as many as fit): Got {}.",
                                            tc.max_concurrent_trials));
  auto& run = opts.run;
  if (run.verbose < 0 || run.verbose > 2)
    throw std::invalid_argument(fmt::format("run.verbose must be 0, 1 or 2: Got {}.", run.verbose));
  if (!(run.progress_interval_s > 0))
    throw std::invalid_argument(fmt::format("run.progress_interval_s must be > 0: Got {}.",
                                            run.progress_interval_s));
  if (run.failure.max_failures < -1)
    throw std::invalid_argument(fmt::format("max_failures must be >= -1 (-1: no limit): Got {}.",
                                            run.failure.max_failures));
  if (run.checkpoint.num_to_keep && *run.checkpoint.num_to_keep < 1)
    throw std::invalid_argument(
      fmt::format("num_to_keep must be >= 1: Got {}.", *run.checkpoint.num_to_keep));
  if (run.name.empty())
    run.name = default_name();
  if (run.name.find('/') != std::string::npos || run.name == "." || run.name == "..")
    throw std::invalid_argument(
      fmt::format("run name must be a plain directory name: Got '{}'.", run.name));
  if (run.storage_path.empty())
    run.storage_path = default_storage();
  dir = fs::path{run.storage_path} / run.name;
  seed = tc.seed != 0 ? tc.seed
                      : static_cast<uint64_t>(
                          std::chrono::steady_clock::now().time_since_epoch().count());
  flatten(opts.param_space); // an empty space: before anything else
  searcher = tc.search_alg ? tc.search_alg : std::make_shared<basic_variant_generator>();
  if (auto* basic = dynamic_cast<basic_variant_generator*>(searcher.get())) {
    if (tc.num_samples < 0)
      throw std::invalid_argument("tune_config.num_samples = -1 runs until the searcher ends; "
                                  "the basic variant generator never does: give a number");
    basic->set_num_samples(tc.num_samples);
  }
  searcher->set_search_properties(metric, mode, opts.param_space, seed);
  total = searcher->total_trials(tc.num_samples);
  if (tc.num_samples > 0 && (total < 0 || total > tc.num_samples)
      && !dynamic_cast<basic_variant_generator*>(searcher.get()))
    total = tc.num_samples;
  sched = tc.scheduler ? tc.scheduler : std::make_shared<fifo_scheduler>();
  sched->set_search_properties(metric, mode);
  // Every trial's options are the factory's; one made now fails here.
  if (!restored) {
    std::mt19937_64 probe{seed};
    config sample;
    for (auto& l : flatten(opts.param_space)) {
      auto& p = l.p->get();
      if (auto* v = std::get_if<value>(&p))
        sample[l.path] = *v;
      else if (auto* d = std::get_if<domain>(&p))
        sample[l.path] = d->sample(probe);
      else if (auto* g = std::get_if<grid>(&p))
        sample[l.path] = g->values.front();
    }
    auto o = factory.options_for(sample);
    if (o.scaling.num_workers < 1 || o.scaling.cpus_per_worker < 1)
      throw std::invalid_argument(fmt::format(
        "the trainer_factory's scaling_config needs num_workers >= 1 and cpus_per_worker >= 1: "
        "Got {} and {}.",
        o.scaling.num_workers, o.scaling.cpus_per_worker));
  }
}

// -- the cluster's resources -------------------------------------------------------

void tuner::impl::refresh_view() {
  auto view = runtime_access::cluster(rt, std::chrono::milliseconds{10s});
  totals.clear();
  for (auto& n : view.nodes)
    totals.push_back({n.node_id, n.total.cpus, n.total.gpus, n.total.cpus, n.total.gpus});
  view_at = std::chrono::steady_clock::now();
}

std::vector<node_resources> tuner::impl::free_view() const {
  auto view = totals;
  for (auto& t : trials) {
    if (!t.plan || t.info.status != trial_status::running)
      continue;
    for (auto& a : t.plan->nodes)
      for (auto& n : view)
        if (n.node_id == a.node_id) {
          n.free_cpus -= a.cpus;
          n.free_gpus -= a.gpus;
        }
  }
  return view;
}

bool tuner::impl::fits(const trial_info& t, const std::vector<node_resources>& view) const {
  return plan_placement(request_of(t), view).has_value();
}

// -- trials ------------------------------------------------------------------------

trial& tuner::impl::add_trial(const std::string& id, config cfg) {
  auto& t = trials.emplace_back();
  t.info.trial_id = id;
  t.info.config = std::move(cfg);
  auto o = factory.options_for(t.info.config);
  t.info.num_workers = o.scaling.num_workers;
  t.info.cpus_per_worker = o.scaling.cpus_per_worker;
  return t;
}

void tuner::impl::create_trials() {
  bool adaptive = !dynamic_cast<basic_variant_generator*>(searcher.get());
  while (!searcher_done) {
    if (total >= 0 && static_cast<int64_t>(trials.size()) >= total) {
      searcher_done = true;
      break;
    }
    auto ahead = adaptive ? size_t{1} : pending_ahead;
    if (pending.size() >= ahead)
      break;
    if (adaptive) {
      // One at a time, when a gang is free for it: its config then uses
      // every result so far.
      auto cap = opts.tune_config.max_concurrent_trials;
      if (cap > 0 && running() >= cap)
        break;
    }
    auto id = trial_name(trials.size());
    auto cfg = searcher->suggest(id);
    if (!cfg) {
      if (adaptive && running() > 0 && total < 0)
        break; // it may have more once results come
      searcher_done = true;
      break;
    }
    auto& t = add_trial(id, std::move(*cfg));
    fs::create_directories(dir / id);
    write_params(t);
    sched->on_trial_add(t.info);
    pending.push_back(&t);
    state_dirty = true;
    note(fmt::format("{} created: {}", id, to_json(t.info.config)));
  }
}

void tuner::impl::schedule() {
  if (std::chrono::steady_clock::now() - view_at > view_refresh)
    refresh_view();
  auto cap = opts.tune_config.max_concurrent_trials;
  for (;;) {
    create_trials();
    bool started_one = false;
    auto view = free_view();
    for (auto it = pending.begin(); it != pending.end(); ++it) {
      if (cap > 0 && running() >= cap)
        return;
      auto& t = **it;
      if (!fits(t.info, totals)) {
        // Never fits, even on an idle cluster.
        int cpus = 0;
        for (auto& n : totals)
          cpus += n.total_cpus;
        t.info.status = trial_status::error;
        t.error = fmt::format("its gang ({} workers x {} CPUs) does not fit the cluster ({} "
                              "CPUs on {} nodes)",
                              t.info.num_workers, t.info.cpus_per_worker, cpus, totals.size());
        fs::create_directories(dir / t.info.trial_id);
        std::ofstream{dir / t.info.trial_id / "error.txt"} << t.error << "\n";
        sched->on_trial_error(t.info);
        searcher->on_trial_complete(t.info.trial_id, {}, true);
        pending.erase(it);
        state_dirty = true;
        started_one = true; // the queue changed: look again
        break;
      }
      if (!fits(t.info, view)) {
        if (it == pending.begin() && t.bypassed >= max_bypass)
          return; // its turn: nothing passes it any more
        continue;
      }
      for (auto e = pending.begin(); e != it; ++e)
        ++(*e)->bypassed;
      t.plan = plan_placement(request_of(t.info), view);
      pending.erase(it);
      start(t);
      started_one = true;
      break;
    }
    if (!started_one)
      return;
  }
}

void tuner::impl::start(trial& t) {
  auto o = factory.options_for(t.info.config);
  o.config = t.info.config;
  o.run.name = t.info.trial_id;
  o.run.storage_path = dir.string();
  o.run.verbose = 0;
  o.run.failure = opts.run.failure;
  o.run.checkpoint = opts.run.checkpoint;
  o.resume_from_checkpoint = t.resume;
  t.info.status = trial_status::running;
  t.thread_done = false;
  t.spans.emplace_back(unix_now(), 0);
  state_dirty = true;
  note(fmt::format("{} started{}", t.info.trial_id,
                   t.resume ? " from " + fs::path{t.resume.path()}.filename().string() : ""));
  if (t.thread.joinable())
    t.thread.join();
  t.thread = std::thread{[this, &t, o = std::move(o)]() mutable { run_trial(t, std::move(o)); }};
}

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

// -- the experiment ----------------------------------------------------------------

result_grid tuner::impl::run() {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw error(fmt::format("tune: cannot create '{}': {}", dir.string(), ec.message()));
  started = last_table = std::chrono::steady_clock::now();
  refresh_view();
  if (totals.empty())
    throw error("tune: the cluster has no live nodes");
  std::unique_lock<std::mutex> lock{mu};
  auto interval = std::chrono::duration<double>(opts.run.progress_interval_s);
  auto stop_all = [&] {
    // Wait for every running fit; a fatal problem stops them at their next
    // report.
    changed.wait(lock, [&] { return running() == 0; });
  };
  try {
    save_state();
    for (;;) {
      if (!fatal.empty())
        break;
      schedule();
      if (state_dirty)
        save_state();
      if (running() == 0 && pending.empty() && searcher_done)
        break;
      if (running() == 0 && pending.empty() && !searcher_done) {
        create_trials();
        if (pending.empty() && searcher_done)
          break;
        if (pending.empty())
          throw error("tune: the search algorithm suggested nothing while no trial ran");
      }
      if (std::chrono::steady_clock::now() - last_table >= interval)
        print_table(false);
      changed.wait_for(lock, std::min<std::chrono::duration<double>>(interval, 1s));
    }
  } catch (...) {
    fatal = fatal.empty() ? "the tuner failed" : fatal;
    stop_all();
    for (auto& t : trials)
      if (t.thread.joinable()) {
        lock.unlock();
        t.thread.join();
        lock.lock();
      }
    throw;
  }
  stop_all();
  lock.unlock();
  for (auto& t : trials)
    if (t.thread.joinable())
      t.thread.join();
  lock.lock();
  if (!fatal.empty() && fatal_is_input) {
    save_state();
    throw std::invalid_argument("tune: " + fatal);
  }
  if (!fatal.empty())
    throw error("tune: " + fatal);
  save_state();
  print_table(true);

  result_grid g;
  g.metric_ = metric;
  g.mode_ = mode;
  g.path_ = dir.string();
  bool reported = metric.empty();
  std::set<std::string> seen;
  for (auto& t : trials) {
    result r;
    r.trial_id = t.info.trial_id;
    r.config = t.info.config;
    r.status = t.info.status;
    r.metrics = t.history.empty() ? metrics{} : t.history.back();
    r.metrics_history = t.history;
    r.checkpoint = t.info.checkpoint;
    r.path = (dir / t.info.trial_id).string();
    r.error = t.error;
    r.stopped_early = t.stopped_early;
    r.fit_spans = t.spans;
    for (auto& [k, v] : r.metrics)
      seen.insert(k);
    reported = reported || r.metrics.count(metric);
    g.results_.push_back(std::move(r));
  }
  if (!reported && g.num_errors() < g.size()) {
    std::string names;
    for (auto& s : seen)
      names += (names.empty() ? "" : ", ") + s;
    throw std::invalid_argument(fmt::format(
      "tune: no trial reported the metric '{}' (tune_config.metric); they reported: {}", metric,
      names.empty() ? "nothing" : names));
  }
  return g;
}

// -- the public face ---------------------------------------------------------------

train::trainer_options trainer_factory::options_for(const config& cfg) const {
  auto o = options_ ? options_(cfg) : train::trainer_options{};
  o.config = cfg;
  return o;
}

tuner::tuner(runtime& rt, trainer_factory factory, tuner_options opts)
    : impl_(std::make_unique<impl>(rt, std::move(factory), std::move(opts))) {
  impl_->validate_and_set_up();
}

tuner::tuner(std::unique_ptr<impl> p) : impl_(std::move(p)) {
}

tuner::tuner(tuner&&) noexcept = default;

tuner::~tuner() {
  if (!impl_)
    return;
  for (auto& t : impl_->trials)
    if (t.thread.joinable())
      t.thread.join();
}

result_grid tuner::fit() {
  return impl_->run();
}

bool tuner::can_restore(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(fs::path{path} / experiment_file, ec);
}

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
  auto& st = *p;
  for (auto& r : rec.trials) {
    auto& t = st.trials.emplace_back();
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
    std::ifstream in{st.dir / r.trial_id / "result.json"};
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
    st.searcher->on_restored_trial(t.info.trial_id, t.info.config);
    st.sched->on_trial_add(t.info);
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
      std::ofstream out{st.dir / r.trial_id / "result.json", std::ios::trunc};
      for (auto& m : t.history)
        out << to_json(m) << "\n";
    }
    for (auto& m : t.history) {
      t.info.last_result = m;
      try {
        (void)st.sched->on_trial_result(t.info, m);
      } catch (const std::exception&) {
      }
    }
    if (t.info.status == trial_status::terminated) {
      st.sched->on_trial_complete(t.info, t.info.last_result);
      st.searcher->on_trial_complete(t.info.trial_id, t.info.last_result, false);
    } else if (t.info.status == trial_status::error) {
      st.sched->on_trial_error(t.info);
      st.searcher->on_trial_complete(t.info.trial_id, {}, true);
    } else {
      st.pending.push_back(&t);
    }
  }
  return tuner{std::move(p)};
}

// -- results -----------------------------------------------------------------------

const result& result_grid::get_best_result(std::string metric, std::string mode,
                                           const std::string& scope) const {
  if (metric.empty())
    metric = metric_;
  if (mode.empty())
    mode = mode_;
  if (metric.empty() || mode.empty())
    throw std::invalid_argument("get_best_result: no metric and mode: pass them, or set "
                                "tune_config.metric and tune_config.mode");
  if (mode != "min" && mode != "max")
    throw std::invalid_argument(
      fmt::format("get_best_result: mode must be 'min' or 'max': Got '{}'.", mode));
  if (scope != "last" && scope != "all")
    throw std::invalid_argument(
      fmt::format("get_best_result: scope must be 'last' or 'all': Got '{}'.", scope));
  const result* best = nullptr;
  double best_score = 0;
  std::set<std::string> names;
  for (auto& r : results_) {
    auto consider = [&](const metrics& m) {
      for (auto& [k, v] : m)
        names.insert(k);
      auto i = m.find(metric);
      if (i == m.end() || i->second.is_string() || std::isnan(i->second.as_double()))
        return;
      auto x = mode == "max" ? i->second.as_double() : -i->second.as_double();
      if (!best || x > best_score) {
        best = &r;
        best_score = x;
      }
    };
    if (scope == "last")
      consider(r.metrics);
    else
      for (auto& m : r.metrics_history)
        consider(m);
  }
  if (!best) {
    std::string list;
    for (auto& n : names)
      list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument(
      fmt::format("get_best_result: no trial reported the metric '{}'; the results hold: {}",
                  metric, list.empty() ? "nothing" : list));
  }
  return *best;
}

size_t result_grid::num_errors() const {
  return static_cast<size_t>(std::count_if(results_.begin(), results_.end(), [](auto& r) {
    return r.status == trial_status::error;
  }));
}

size_t result_grid::num_terminated() const {
  return static_cast<size_t>(std::count_if(results_.begin(), results_.end(), [](auto& r) {
    return r.status == trial_status::terminated;
  }));
}

std::vector<std::string> result_grid::errors() const {
  std::vector<std::string> out;
  for (auto& r : results_)
    if (r.status == trial_status::error)
      out.push_back(r.trial_id + ": " + r.error);
  return out;
}

std::string result_grid::table() const {
  // The config entries that differ between trials (Ray's table leaves
  // the constants out).
  std::set<std::string> cols;
  for (auto& r : results_)
    for (auto& [k, v] : r.config)
      if (!cols.count(k))
        for (auto& other : results_)
          if (auto i = other.config.find(k); i == other.config.end() || !(i->second == v)) {
            cols.insert(k);
            break;
          }
  std::vector<std::string> head{"Trial name", "status"};
  for (auto& c : cols)
    head.push_back("config/" + c);
  head.push_back("iter");
  if (!metric_.empty())
    head.push_back(metric_);
  head.push_back("error");
  std::vector<std::vector<std::string>> rows;
  for (auto& r : results_) {
    std::vector<std::string> row{r.trial_id, to_string(r.status)};
    for (auto& c : cols) {
      auto i = r.config.find(c);
      row.push_back(i == r.config.end() ? "" : i->second.to_string());
    }
    auto get = [&](const std::string& k) {
      auto i = r.metrics.find(k);
      return i == r.metrics.end() ? std::string{} : i->second.to_string();
    };
    row.push_back(get("training_iteration"));
    if (!metric_.empty())
      row.push_back(get(metric_));
    row.push_back(r.error.size() > 60 ? r.error.substr(0, 57) + "..." : r.error);
    rows.push_back(std::move(row));
  }
  return format_table(head, rows);
}

std::ostream& operator<<(std::ostream& out, const result_grid& g) {
  return out << g.table();
}

} // namespace hvactor::tune
