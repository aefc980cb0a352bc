// hvactor::tune's tuner: creates trials from the search algorithm, packs
// their gangs onto the cluster (a trial starts as soon as its gang fits;
// a smaller one may pass a bigger one that does not fit yet, a bounded
// number of times), runs each as an hvactor::train fit on a thread of its
// own, hands every result to the scheduler and acts on its decision, and
// keeps the experiment directory current (internal/experiment.hpp).

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

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
#include "tune/internal/tuner_state.hpp"

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

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
    .count();
}

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

// -- the experiment ----------------------------------------------------------------

// One driver per experiment: a second one (a restore while the first still
// runs) would write the same files. Returns the held lock's descriptor;
// then cuts the restored trials' result.json back to their checkpoints.
int tuner::impl::take_experiment() {
  int fd = ::open((dir / ".driver.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (fd >= 0)
      ::close(fd);
    throw error(fmt::format("tune: the experiment '{}' is being run by another driver (or its "
                            "lock file cannot be opened)",
                            dir.string()));
  }
  for (auto& t : trials)
    if (t.rewrite_results) {
      std::ofstream out{dir / t.info.trial_id / "result.json", std::ios::trunc};
      for (auto& m : t.history)
        out << to_json(m) << "\n";
      t.rewrite_results = false;
    }
  return fd;
}

result_grid tuner::impl::run() {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw error(fmt::format("tune: cannot create '{}': {}", dir.string(), ec.message()));
  auto lock_fd = take_experiment();
  struct closer {
    int fd;
    ~closer() {
      ::close(fd);
    }
  } held{lock_fd};
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

  return results();
}

// The grid of every trial's outcome; std::invalid_argument when no trial
// reported the experiment's metric.
result_grid tuner::impl::results() const {
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

} // namespace hvactor::tune
