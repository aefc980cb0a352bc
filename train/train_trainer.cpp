// hvactor::train's driver: trainer::fit() starts a worker group per
// attempt, hands it the shards and the checkpoint to resume from through
// the attempt's train_progress actor (which also follows its reports and
// persists rank 0's checkpoints) and restarts a failed group (internal/train_protocol.hpp, internal/train_progress.hpp).

#include <unistd.h>

#include <cstdio>
#include <ostream>
#include <ctime>
#include <fstream>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "hvactor/code_registry.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "driver/internal/executor_access.hpp"
#include "driver/internal/job_session.hpp"
#include "base/internal/knobs_elastic.hpp"
#include "base/internal/log.hpp"
#include "base/net/transport.hpp"
#include "train/internal/event_file.hpp"
#include "train/internal/train_board.hpp"
#include "train/internal/trainer_access.hpp"
#include "train/internal/progress_line.hpp"
#include "train/internal/shard_bytes.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"
#include "train/internal/transfer.hpp"
#include "base/internal/env_names.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace hvactor::train {

checkpoint checkpoint::from_directory(std::string path) {
  checkpoint c;
  c.path_ = std::move(path);
  return c;
}

std::string result::error_message() const {
  if (!error)
    return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

std::ostream& operator<<(std::ostream& out, const result& r) {
  std::string metrics;
  for (auto& [k, v] : r.metrics)
    metrics += fmt::format("{}'{}': {}", metrics.empty() ? "" : ", ", k,
                           v.is_string() ? "'" + v.as_string() + "'" : v.to_string());
  out << fmt::format("Result(metrics={{{}}}, path='{}', checkpoint={}", metrics, r.path,
                     r.checkpoint ? "Checkpoint(path='" + r.checkpoint.path() + "')" : "None");
  if (r.error)
    out << fmt::format(", error='{}'", r.error_message());
  return out << ")";
}

namespace {

std::string default_name() {
  auto t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "hvactor_train_%Y-%m-%d_%H-%M-%S", &tm);
  return buf;
}

std::string default_storage() {
  auto home = env::get("HOME").value_or("");
  return (home.empty() ? fs::temp_directory_path() : fs::path{home}) / "hvactor_results";
}


/// Thrown by record() when the report hook stops the fit (not an error).
struct stop_requested {};

} // namespace

struct trainer::impl {
  runtime& rt;
  std::string loop;
  trainer_options opts;
  fs::path run_dir;

  // Across attempts of one fit().
  result res;
  int64_t iteration = 0;
  std::chrono::steady_clock::time_point started, last_report;
  std::shared_ptr<progress> out;
  /// This fit's TensorBoard file; gone after a failed write (a warning).
  std::unique_ptr<tensorboard::event_file> events;
  void write_events(const metrics& m);
  /// The attempt's registry (the head's dashboard) and job.
  proto::node_registry board;
  std::string job_id;
  /// A tune trial's hooks (internal/trainer_access.hpp).
  trial_hooks hooks;
  bool stopped = false;

  void run_attempt(int attempt, const checkpoint& resume);
  /// The attempt's shard files (the same machine's route), if any.
  fs::path shard_dir;
  void write_shards(int size);
  train_spec make_spec(executor& ex, int attempt, const checkpoint& resume);
  void follow(executor& ex, std::vector<future<void>>& calls, const train_progress& progress,
              int attempt);
  void record(train_event& ev, int size, int attempt);
};

std::string trainer::encode_loop(loop_fn fn) {
  return hvactor::detail::encode_code_address(reinterpret_cast<const void*>(fn));
}

trainer::trainer(runtime& rt, std::string loop, trainer_options opts, int) {
  auto& s = opts.scaling;
  if (s.num_workers < 1)
    throw std::invalid_argument(fmt::format("num_workers must be >= 1: Got {}.", s.num_workers));
  if (s.cpus_per_worker < 1)
    throw std::invalid_argument(
      fmt::format("cpus_per_worker must be >= 1: Got {}.", s.cpus_per_worker));
  if (s.gpus_per_worker && !s.use_gpu)
    throw std::invalid_argument("gpus_per_worker is set, but use_gpu is False.");
  if (s.gpus_per_worker && *s.gpus_per_worker < 1)
    throw std::invalid_argument(
      fmt::format("gpus_per_worker must be >= 1: Got {}.", *s.gpus_per_worker));
  if (opts.run.failure.max_failures < -1)
    throw std::invalid_argument(fmt::format("max_failures must be >= -1 (-1: no limit): Got {}.",
                                            opts.run.failure.max_failures));
  if (opts.run.checkpoint.num_to_keep && *opts.run.checkpoint.num_to_keep < 1)
    throw std::invalid_argument(fmt::format("num_to_keep must be >= 1: Got {}.",
                                            *opts.run.checkpoint.num_to_keep));
  if (opts.run.verbose < 0 || opts.run.verbose > 1)
    throw std::invalid_argument(
      fmt::format("verbose must be 0 or 1: Got {}.", opts.run.verbose));
  if (opts.run.name.empty())
    opts.run.name = default_name();
  if (opts.run.name.find('/') != std::string::npos || opts.run.name == "."
      || opts.run.name == "..")
    throw std::invalid_argument(
      fmt::format("run name must be a plain directory name: Got '{}'.", opts.run.name));
  if (opts.run.storage_path.empty())
    opts.run.storage_path = default_storage();
  for (auto& [name, _] : opts.datasets)
    if (name.empty() || name.find('/') != std::string::npos)
      throw std::invalid_argument(
        fmt::format("dataset names must be non-empty and without '/': Got '{}'.", name));
  validate(opts.settings);
  auto dir = fs::path{opts.run.storage_path} / opts.run.name;
  impl_.reset(new impl{rt, std::move(loop), std::move(opts), std::move(dir)});
}

trainer::~trainer() = default;

result trainer::fit() {
  auto& st = *impl_;
  auto& o = st.opts;
  if (o.resume_from_checkpoint) {
    std::error_code ec;
    if (!fs::is_directory(o.resume_from_checkpoint.path(), ec))
      throw std::invalid_argument(fmt::format("resume_from_checkpoint: '{}' is not a directory",
                                              o.resume_from_checkpoint.path()));
  }
  std::error_code ec;
  fs::create_directories(st.run_dir, ec);
  if (ec)
    throw error(fmt::format("train: cannot create '{}': {}", st.run_dir.string(), ec.message()));
  // A driver killed while it wrote a checkpoint left a partial one, or one
  // past num_to_keep half removed.
  for (fs::directory_iterator it{st.run_dir, ec}, end; !ec && it != end; it.increment(ec))
    if (auto name = it->path().filename().string();
        name.starts_with(".partial_") || name.starts_with(".removing_"))
      fs::remove_all(it->path(), ec);
  ec.clear();
  st.res = {};
  st.res.path = st.run_dir.string();
  st.iteration = 0;
  st.started = st.last_report = std::chrono::steady_clock::now();
  st.stopped = false;
  st.out = std::make_shared<progress>(o.run.verbose, o.run.name, o.scaling.num_workers,
                                      st.hooks.output_prefix);
  try {
    st.events = std::make_unique<tensorboard::event_file>(st.run_dir);
  } catch (const std::exception& e) {
    log::warn("{}: the run goes on without TensorBoard", e.what());
  }
  auto resume = o.resume_from_checkpoint;
  int failures = 0;
  for (int attempt = 0;; ++attempt) {
    try {
      st.run_attempt(attempt, resume);
      st.res.error = nullptr;
      break;
    } catch (const stop_requested&) {
      // The workers are gone: run_attempt's executor shut them down.
      st.stopped = true;
      st.res.error = nullptr;
      break;
    } catch (const std::exception& e) {
      // Before any worker ran, the error is the user's to see (placement,
      // a dataset that cannot be sent): nothing to restart from.
      if (attempt == 0 && st.iteration == 0 && !dynamic_cast<const worker_error*>(&e)
          && !dynamic_cast<const node_lost*>(&e)) {
        st.out->end_live();
        throw;
      }
      st.res.error = std::current_exception();
      ++failures;
      auto limit = o.run.failure.max_failures;
      if (limit >= 0 && failures > limit) {
        st.out->note(fmt::format("the worker group failed ({} failure{}, max_failures {}): {}",
                                 failures, failures == 1 ? "" : "s", limit, e.what()));
        break;
      }
      if (st.res.checkpoint)
        resume = st.res.checkpoint;
      st.out->note(fmt::format("the worker group failed (failure {} of {}): {}; restarting {}",
                               failures, limit < 0 ? "unlimited" : std::to_string(limit),
                               e.what(),
                               resume ? "from " + fs::path{resume.path()}.filename().string()
                                      : "from the start"));
    }
  }
  st.out->end_live();
  st.events.reset();
  return std::move(st.res);
}

void trainer::impl::run_attempt(int attempt, const checkpoint& resume) {
  auto& s = opts.scaling;
  executor_options eo;
  eo.num_workers = s.num_workers;
  eo.cpus_per_worker = s.cpus_per_worker;
  eo.use_gpu = s.use_gpu;
  eo.gpus_per_worker = s.gpus_per_worker;
  executor ex{rt, opts.settings, eo};
  // The workers' output reaches the driver line by line, so that it never
  // tears the progress line.
  executor_access::set_output(ex, proto::output_forward,
                              [out = out](int rank, int stream, const std::string& line) {
                                out->worker_line(rank, stream, line);
                              });
  ex.start();
  board = executor_access::board(ex);
  job_id = executor_access::job(ex).job_id;
  struct remove_shards {
    fs::path& dir;
    ~remove_shards() {
      std::error_code ec;
      if (!dir.empty())
        fs::remove_all(dir, ec);
      dir.clear();
    }
  } shards_gone{shard_dir};
  auto spec = make_spec(ex, attempt, resume);
  // The attempt's record of reports and checkpoints; the workers reach it
  // where they reach the store.
  progress_config pc{ex.num_workers(), run_dir, opts.run.checkpoint.num_to_keep,
                     executor_access::job(ex).workers, spec.local_checkpoints, shard_dir,
                     spec.resume_path};
  pc.ticket_bound = wait_bound(opts.settings.timeout);
  auto& session = executor_access::session(ex);
  published_progress progress{session.system(), std::move(pc), session.bind_host(),
                              session.tls_identity()};
  spec.progress_port = progress.port();
  spec.data_port = progress.data_port();
  auto calls = ex.run_remote(&run_worker, spec);
  follow(ex, calls, progress.actor(), attempt);
  ex.shutdown();
}

// What every worker runs; the shards are written as files first.
train_spec trainer::impl::make_spec(executor& ex, int attempt, const checkpoint& resume) {
  auto& session = executor_access::session(ex);
  auto scope = executor_access::job(ex).job_id + "/train";
  auto& sys = session.system();
  auto bound = wait_bound(opts.settings.timeout);
  auto size = ex.num_workers();
  train_spec spec;
  spec.loop = loop;
  spec.scope = scope;
  // The same machine's route (internal/transfer.hpp): every peer of the
  // driver is this user's process on this machine; checkpoints are copied
  // by the driver and shards are mapped files.
  spec.local_checkpoints = same_machine_allowed(session.bind_host(), transport::secure(sys));
  for (auto& [name, ds] : opts.datasets)
    spec.datasets.push_back(name);
  if (spec.local_checkpoints)
    spec.machine_view = machine_view();
  // Shards are files the progress actor serves on its data link
  // (tr_fetch); a worker that sees the driver's files maps them instead.
  if (!opts.datasets.empty()) {
    write_shards(size);
    spec.shard_dir = shard_dir.string();
  }
  // The checkpoint to resume from stays where it is: the progress actor
  // streams it on its data link to each worker that asks (tr_fetch), or a
  // worker on the same machine's route copies it.
  if (resume) {
    checkpoint_source check{resume.path()}; // not a readable directory: fail here
    spec.has_resume = true;
    spec.resume_name = fs::path{resume.path()}.filename().string();
    spec.resume_path = fs::absolute(resume.path()).string();
  }
  spec.config = encode_values(opts.config);
  spec.name = opts.run.name;
  spec.attempt = attempt;
  spec.report_limit_ms = std::chrono::milliseconds{knobs::train_report_limit}.count();
  spec.timeout_ms = bound.count();
  return spec;
}

// Every rank's shard of every dataset as a file under a fresh 0700
// directory (mkdtemp), "<dataset index>/<rank>".
void trainer::impl::write_shards(int size) {
  shard_dir = make_shard_dir(fs::temp_directory_path());
  size_t index = 0;
  for (auto& [name, ds] : opts.datasets) {
    auto dir = shard_dir / std::to_string(index++);
    fs::create_directory(dir);
    for (int r = 0; r < size; ++r) {
      auto bytes = ds.shard(r, size, opts.dataset_config).to_bytes();
      auto path = dir / std::to_string(r);
      std::ofstream out{path, std::ios::binary};
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!out.flush())
        throw error(fmt::format("train: cannot write the shard file '{}'", path.string()));
    }
  }
}

// Waits on the progress actor for each report, in order, until every rank
// returned from the loop or the attempt failed. Every wait is bounded and
// watches the actor (ask); a report arrives as a message, not by polling.
void trainer::impl::follow(executor& ex, std::vector<future<void>>& calls,
                           const train_progress& progress, int attempt) {
  auto& sys = executor_access::session(ex).system();
  auto size = ex.num_workers();
  for (uint64_t next = 0;;) {
    // A fresh blocking actor per wait: the answer to a wait that timed out
    // (the actor fails it when the next wait comes) dies with its actor.
    auto ev = ask<train_event>(sys, progress, await_bound, tr_await_atom_v, next);
    if (!ev) {
      if (ev.error() != caf::sec::request_timeout)
        throw_caf_error(ev.error(), "train: the run's progress actor");
      // Quiet for a while: still running, unless every call ended without
      // the driver hearing of it.
      if (std::all_of(calls.begin(), calls.end(), [](auto& c) { return c.ready(); })) {
        for (auto& c : calls)
          c.get(); // throws the worker's error
        return;
      }
      continue;
    }
    switch (ev->kind) {
      case train_event::report:
        record(*ev, size, attempt);
        ++next;
        continue;
      case train_event::done:
        for (auto& c : calls)
          c.get();
        return;
      case train_event::rank_failed:
        if (ev->rank >= 0 && static_cast<size_t>(ev->rank) < calls.size())
          calls[static_cast<size_t>(ev->rank)].get(); // throws the worker's error
        throw error("train: " + ev->failure);
      default:
        throw error(ev->failure);
    }
  }
}

// The report's numeric metrics as TensorBoard scalars at its iteration.
void trainer::impl::write_events(const metrics& m) {
  if (!events)
    return;
  try {
    auto now = std::chrono::system_clock::now().time_since_epoch();
    events->add_scalars(iteration, std::chrono::duration<double>(now).count(), m);
  } catch (const std::exception& e) {
    log::warn("{}: the run goes on without TensorBoard", e.what());
    events.reset();
  }
}

// Report `ev.index` of every rank: the run's metrics, history, checkpoint
// and progress line.
void trainer::impl::record(train_event& ev, int size, int attempt) {
  std::vector<metrics> ranks;
  for (auto& bytes : ev.metrics)
    ranks.push_back(decode_report(bytes).first);
  if (!ev.checkpoint_dir.empty())
    res.checkpoint = checkpoint::from_directory(ev.checkpoint_dir);
  auto now = std::chrono::steady_clock::now();
  auto m = ranks.at(0);
  m["training_iteration"] = ++iteration;
  m["attempt"] = attempt;
  m["time_total_s"] = std::chrono::duration<double>(now - started).count();
  m["time_this_iter_s"] = std::chrono::duration<double>(now - last_report).count();
  last_report = now;
  write_events(m);
  if (board)
    caf::anon_send(board, proto::train_point_atom_v,
                   train_point_of(m, job_id, run_dir, iteration, ev.checkpoint_dir,
                                  hooks.experiment));
  res.metrics = m;
  res.metrics_history.push_back(std::move(m));
  res.worker_metrics_history.push_back(std::move(ranks));
  out->report(iteration, std::chrono::duration<double>(now - started).count(), res.metrics,
              size);
  if (!ev.failure.empty())
    throw error("train: " + ev.failure);
  if (hooks.on_report && !hooks.on_report(res.metrics, ev.checkpoint_dir)) {
    out->mute();
    throw stop_requested{};
  }
}

void trainer_access::set_hooks(trainer& t, trial_hooks hooks) {
  t.impl_->hooks = std::move(hooks);
}

bool trainer_access::stopped(const trainer& t) {
  return t.impl_->stopped;
}

} // namespace hvactor::train
