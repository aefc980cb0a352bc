#pragma once

// Internal: how hvactor::train's driver and workers talk. The dataset
// shards are files the driver writes before the loop begins
// (train_spec::shard_dir); the checkpoint to resume from stays on the
// driver's disk. A worker gets both, and hands over rank 0's checkpoints,
// on one of two routes (internal/transfer.hpp): on the driver's own
// machine it maps the shard files and copies the checkpoints, elsewhere
// the bytes go on the driver's data link. Reports go to the driver's
// train_progress actor as typed messages (internal/train_progress.hpp).

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "hvactor/train.hpp"
#include "train/internal/checkpoint_stream.hpp"

namespace hvactor::train {

/// What every worker of one attempt runs (the call's argument).
struct train_spec {
  /// The user's loop (encode_code_address).
  std::string loop;
  /// The store scope.
  std::string scope;
  std::vector<std::string> datasets;
  bool has_resume = false;
  /// Directory name the resumed checkpoint had on the driver, and its path
  /// there (on the same machine's route a worker copies it from there).
  std::string resume_name;
  std::string resume_path;
  /// encode_values(config).
  std::vector<char> config;
  std::string name;
  int32_t attempt = 0;
  /// Bound on one report's wait for the other ranks and the driver.
  int64_t report_limit_ms = 0;
  /// Bound on everything else with the driver (settings.timeout): reaching
  /// it, each ticket and each read and write on the data link.
  int64_t timeout_ms = 0;
  /// The port of the driver's train_progress actor, on the store's host
  /// (internal/train_progress.hpp): report() goes there.
  uint16_t progress_port = 0;
  /// The same machine's route is allowed (same_machine_allowed): the
  /// driver copies rank 0's checkpoint directory itself (tr_local); it is
  /// on this machine's loopback, where only this user's processes can
  /// reach it (the port guard).
  bool local_checkpoints = false;
  /// The shard files: "<shard_dir>/<index in datasets>/<rank>" (a 0700
  /// directory of the driver's, removed when the attempt ends); on the
  /// same machine's route a worker maps its file, otherwise it fetches it
  /// on the data link.
  std::string shard_dir;
  /// machine_view() of the driver: a worker uses the route above only
  /// where its own is the same (one machine, one mount namespace).
  std::string machine_view;
  /// The driver's data link (internal/transfer.hpp), on the progress
  /// actor's host.
  uint16_t data_port = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, train_spec& x) {
  return f(caf::meta::type_name("train_spec"), x.loop, x.scope, x.datasets, x.has_resume,
           x.resume_name, x.config, x.name, x.attempt, x.report_limit_ms, x.timeout_ms, x.progress_port,
           x.local_checkpoints, x.shard_dir, x.machine_view, x.resume_path, x.data_port);
}

/// Throws std::out_of_range: `what` has no column `name` (naming the ones
/// it has).
[[noreturn]] void no_such_column(const std::map<std::string, column>& columns,
                                 const std::string& name, const char* what);

/// The entry point every worker runs: serves the loop's session.
void run_worker(train_spec spec);

/// This process's view of files: the machine's boot id and its mount
/// namespace. Two processes with the same view see the same paths.
std::string machine_view();

/// name -> value maps as bytes, and back (hvactor::error when malformed).
std::vector<char> encode_values(const std::map<std::string, value>& m);
std::map<std::string, value> decode_values(const std::vector<char>& bytes);

/// A report: the metrics and whether rank 0 attached a checkpoint.
std::vector<char> encode_report(const metrics& m, bool has_checkpoint);
std::pair<metrics, bool> decode_report(const std::vector<char>& bytes);

} // namespace hvactor::train
