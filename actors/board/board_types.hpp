#pragma once

// Internal: what the head's dashboard shows of jobs and training runs.
//
// Drivers' coordinators send the head's registry a job_view whenever their
// job changes (at most every board_interval, at once when it ends); their
// colocators sample each worker process's CPU time and resident memory
// (rank_stats). hvactor::train sends a train_point per report. The registry
// keeps the live jobs and the last finished ones (node_registry.cpp) and
// answers `board` with all of it; hvactor-node's dashboard renders that.
//
// Every floating-point member is inspected through detail::exact: CAF's
// own format hangs on an infinity (a metric of +inf from a report), turns
// NaN into 1 (hvactor/float_bits.hpp).

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "hvactor/float_bits.hpp"

namespace hvactor::proto {

/// The dashboard's bounds: how often a coordinator sends its job and a
/// colocator samples its workers; what the registry and a job keep.
namespace board_limits {
inline constexpr auto job_interval = std::chrono::milliseconds(1000);
inline constexpr auto sample_interval = std::chrono::milliseconds(2000);
/// While a colocator's samples do not change, it looks less often, up to
/// this (usage_pacer.hpp): a job that turns busy shows within it.
inline constexpr auto max_sample_interval = std::chrono::milliseconds(16000);
/// How long an ending job waits for the head to take its last view: a
/// round trip to a live head, and short enough that a driver whose head is
/// going away too (scancel of a Slurm job) still exits promptly.
inline constexpr auto final_bound = std::chrono::milliseconds(300);
inline constexpr size_t max_points = 2048;
inline constexpr size_t max_finished_jobs = 50;
/// Jobs kept in all, live ones included (the oldest go first).
inline constexpr size_t max_jobs = 1000;
inline constexpr size_t max_runs = 50;
inline constexpr size_t max_failures = 20;
inline constexpr size_t log_lines = 40;
inline constexpr size_t max_line = 512;
inline constexpr size_t max_metrics = 64;
} // namespace board_limits

/// One worker process's usage, read from /proc on its node.
struct rank_stat {
  int32_t id = 0;
  double cpu_seconds = 0;
  uint64_t rss_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_stat& x) {
  return f(caf::meta::type_name("rank_stat"), x.id, hvactor::detail::exact(x.cpu_seconds),
           x.rss_bytes);
}

/// A colocator's sample of its workers.
struct rank_stats {
  std::vector<rank_stat> ranks;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_stats& x) {
  return f(caf::meta::type_name("rank_stats"), x.ranks);
}

/// One worker of a job as the dashboard shows it.
struct rank_view {
  /// Worker id (static: the world rank; elastic: start order).
  int32_t id = 0;
  /// Rank in the current world, -1 when it has none (elastic, leaving).
  int32_t rank = -1;
  std::string node;
  int32_t pid = 0;
  /// starting, running, leaving, exited, failed.
  std::string state;
  double cpu_seconds = 0;
  uint64_t rss_bytes = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_view& x) {
  return f(caf::meta::type_name("rank_view"), x.id, x.rank, x.node, x.pid, x.state,
           hvactor::detail::exact(x.cpu_seconds), x.rss_bytes);
}

/// A job's collective operations of one kind on one path (its ranks'
/// counts added up), from the workers' hvactor.collectives events.
struct op_stat {
  /// allreduce, allgather, broadcast, ...
  std::string op;
  /// The backend that ran it: gloo, shm, nccl, ...
  std::string path;
  uint64_t count = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_stat& x) {
  return f(caf::meta::type_name("op_stat"), x.op, x.path, x.count, x.bytes,
           hvactor::detail::exact(x.seconds));
}

/// One job as its coordinator describes it.
struct job_view {
  std::string job_id;
  /// "host (pid N)" of the driver.
  std::string driver;
  /// executor, elastic, run (hvactor-run), run-elastic.
  std::string kind;
  /// placing, starting, running, stopping, succeeded, failed, lost (the
  /// driver went away without saying how the job ended).
  std::string state;
  /// Milliseconds since the epoch.
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  int32_t size = 0;
  /// Elastic jobs: the current generation and the resets so far.
  int32_t generation = -1;
  int32_t resets = 0;
  std::vector<rank_view> ranks;
  /// Why ranks or the job failed, oldest first (bounded).
  std::vector<std::string> failures;
  /// The last lines the workers printed, "[rank] line" (bounded).
  std::vector<std::string> log_tail;
  /// HOROVOD_TIMELINE of the job, when set.
  std::string timeline;
  /// Collective operations by kind and path; the stall inspector's warnings.
  std::vector<op_stat> ops;
  uint64_t stalls = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_view& x) {
  return f(caf::meta::type_name("job_view"), x.job_id, x.driver, x.kind, x.state, x.started_ms,
           x.ended_ms, x.size, x.generation, x.resets, x.ranks, x.failures, x.log_tail,
           x.timeline, x.ops, x.stalls);
}

/// One report of an hvactor::train run.
struct train_point {
  std::string job_id;
  /// The run's name (storage_path/name).
  std::string run;
  std::string storage;
  int64_t iteration = 0;
  double time_s = 0;
  /// Numeric metrics, by name.
  std::vector<std::pair<std::string, double>> metrics;
  /// The report's persisted checkpoint, when it had one.
  std::string checkpoint;
  /// The tune experiment the run belongs to (its directory's name); empty
  /// for a plain fit.
  std::string experiment;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_point& x) {
  return f(caf::meta::type_name("train_point"), x.job_id, x.run, x.storage, x.iteration,
           hvactor::detail::exact(x.time_s), hvactor::detail::exact(x.metrics), x.checkpoint,
           x.experiment);
}

/// A training run's reports as the registry keeps them (thinned to at most
/// board_max_points, the first and the latest always kept).
struct train_run {
  std::string job_id;
  std::string run;
  std::string storage;
  int64_t reports = 0;
  std::vector<train_point> points;
  std::vector<std::string> checkpoints;
  /// The tune experiment of the run's latest point; empty for a plain fit.
  std::string experiment;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_run& x) {
  return f(caf::meta::type_name("train_run"), x.job_id, x.run, x.storage, x.reports, x.points,
           x.checkpoints, x.experiment);
}

/// Everything the registry knows of jobs and runs, for the dashboard.
struct board {
  std::vector<job_view> jobs;
  std::vector<train_run> runs;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, board& x) {
  return f(caf::meta::type_name("board"), x.jobs, x.runs);
}

} // namespace hvactor::proto
