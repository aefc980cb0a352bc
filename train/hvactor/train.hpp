#pragma once

// hvactor::train: Ray Train's HorovodTrainer on the executor (API.md
// "Trainer"). A training loop runs on every worker with its shard of the
// datasets; train::report() sends metrics from every rank and rank 0's
// checkpoint to the driver, which persists it under
// storage_path/name/checkpoint_NNNNNN; a failed worker group restarts from
// the latest checkpoint up to failure.max_failures times.
//
// Tensors: columns hold numbers (float32, float64, int64) without LibTorch;
// with <hvactor/torch.hpp> a column converts to and from torch::Tensor.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "hvactor/executor.hpp"
#include "hvactor/train_data.hpp"
#include "hvactor/train_value.hpp"
#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"

namespace hvactor::train {

// -- checkpoints -------------------------------------------------------------------

/// A directory of files (Ray's Checkpoint.from_directory). report() copies
/// it when called; in a result, or from get_checkpoint(), it is a directory
/// on this machine.
class checkpoint {
public:
  checkpoint() = default;
  static checkpoint from_directory(std::string path);
  const std::string& path() const noexcept {
    return path_;
  }
  explicit operator bool() const noexcept {
    return !path_.empty();
  }
  friend bool operator==(const checkpoint&, const checkpoint&) = default;

private:
  std::string path_;
};

// -- inside the training loop ------------------------------------------------------

/// What a worker's loop knows about its place in the run (Ray's
/// train.get_context()).
class context {
public:
  int world_rank() const noexcept {
    return world_rank_;
  }
  int world_size() const noexcept {
    return world_size_;
  }
  int local_rank() const noexcept {
    return local_rank_;
  }
  int local_world_size() const noexcept {
    return local_world_size_;
  }
  int node_rank() const noexcept {
    return node_rank_;
  }
  /// The trainer's `.config`.
  const train::config& config() const noexcept {
    return config_;
  }
  /// run.name.
  const std::string& experiment_name() const noexcept {
    return name_;
  }
  /// 0 for the first run of the worker group, k after its k-th restart.
  int attempt() const noexcept {
    return attempt_;
  }

private:
  friend struct worker_session;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_world_size_ = 1, node_rank_ = 0;
  int attempt_ = 0;
  train::config config_;
  std::string name_;
};

/// The loop's context; std::logic_error outside a training loop.
context& get_context();

/// This worker's shard of the dataset `name` (fetched from the driver on
/// first use); std::invalid_argument naming the datasets there are.
const dataset& get_dataset_shard(const std::string& name);

/// The checkpoint to resume from (after a restart: the latest persisted
/// one; else `.resume_from_checkpoint`), copied into a directory on this
/// machine; empty when there is none.
checkpoint get_checkpoint();

/// Sends `m` to the driver; rank 0's `ckpt` directory is copied there and
/// persisted (other ranks' checkpoints are ignored). Every worker must call
/// it the same number of times. With a checkpoint (on any rank) it returns
/// once every rank reported this iteration and the checkpoint is persisted
/// (hvactor::error after knobs::train_report_limit otherwise). Without one
/// it queues the metrics and returns at once: they reach the driver in
/// order, and a report the driver refuses, or that it never acknowledges,
/// is thrown by a later report() or fails the loop when it returns. At
/// most 64 reports (64 MiB of metrics) wait; a report beyond them waits
/// for room. A worker killed right after a report without a checkpoint
/// may lose that report.
void report(const metrics& m, const checkpoint& ckpt = {});

// -- the driver --------------------------------------------------------------------

struct scaling_config {
  int num_workers = 1;
  bool use_gpu = false;
  int cpus_per_worker = 1;
  std::optional<int> gpus_per_worker;
};

struct failure_config {
  /// Restarts of the worker group after a failure; -1: no limit.
  int max_failures = 0;
};

struct checkpoint_config {
  /// Persisted checkpoints kept (the newest); unset: all.
  std::optional<int> num_to_keep;
};

struct run_config {
  /// Directory under storage_path; default "hvactor_train_<date>_<time>".
  std::string name;
  /// Where checkpoints are persisted, on the driver's machine; default
  /// $HOME/hvactor_results.
  std::string storage_path;
  failure_config failure;
  checkpoint_config checkpoint;
  /// 0: no progress output; 1: a line per report (live on a terminal).
  int verbose = 1;
};

struct trainer_options {
  scaling_config scaling;
  std::map<std::string, dataset> datasets;
  /// How every dataset is split among the workers (HorovodTrainer's
  /// dataset_config): equal shares by default, `{.equal = false}` for
  /// shares that keep every row.
  data_config dataset_config;
  run_config run;
  /// Where a new fit starts from (get_checkpoint() in the loop).
  checkpoint resume_from_checkpoint;
  train::config config;
  /// The executor's settings (timeouts) for each worker group.
  hvactor::settings settings;
};

/// What fit() returns (Ray's Result).
struct result {
  /// Rank 0's last report, with training_iteration (1-based over the whole
  /// fit), attempt, time_total_s and time_this_iter_s added.
  train::metrics metrics;
  /// The latest persisted checkpoint (a directory under path); empty if none.
  train::checkpoint checkpoint;
  /// Every report of rank 0, in order, across restarts.
  std::vector<train::metrics> metrics_history;
  /// Every rank's metrics of each report (by iteration, then rank).
  std::vector<std::vector<train::metrics>> worker_metrics_history;
  /// Why the fit failed (the last worker group's error); null on success.
  std::exception_ptr error;
  /// storage_path/name.
  std::string path;

  /// error's text; empty on success.
  std::string error_message() const;
};

/// "Result(metrics={...}, path=..., checkpoint=Checkpoint(path=...))", or
/// with error=... when the fit failed (Ray's print(result)).
std::ostream& operator<<(std::ostream& out, const result& r);

/// Ray Train's HorovodTrainer: runs `loop` on a group of workers.
class trainer {
public:
  using loop_fn = void (*)(context&);

  /// Validates `opts` (std::invalid_argument): num_workers >= 1,
  /// cpus_per_worker >= 1, gpus_per_worker only with use_gpu,
  /// max_failures >= -1, num_to_keep >= 1, a name without '/', verbose 0 or 1.
  template <class F>
  trainer(runtime& rt, F loop, trainer_options opts)
      : trainer(rt, encode_loop(hvactor::detail::to_pointer(loop)), std::move(opts), 0) {
  }
  ~trainer();

  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  /// Trains: starts the worker group, runs the loop on every worker,
  /// persists the checkpoints, restarts after failures; returns when the
  /// loop returned on every worker or the failures ran out (result.error).
  /// Errors before any worker ran (placement, invalid datasets) throw.
  result fit();

private:
  friend struct trainer_access;
  static std::string encode_loop(loop_fn fn);
  trainer(runtime& rt, std::string loop, trainer_options opts, int);

  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::train
