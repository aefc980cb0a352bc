#pragma once

// What a collective's sweep (sweep.cpp) measures and writes: its
// configuration, one row per size, and the report files (sweep_report.cpp).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/load.hpp"
#include "tools/hvactor_bench/peers/peer.hpp"

namespace hvactor::bench_tool {

/// One implementation's measurement of one size over every round: time_us
/// is the median of the rounds' times per call (each the slowest rank's
/// loop / calls), range the rounds' (max - min) / median.
struct peer_row {
  std::string name;
  double time_us = 0, busbw = 0, range = 0;
  int64_t wrong = 0;
  std::vector<double> round_us, samples;
};

/// hvactor's measurement of one size, with its peers'.
struct row {
  size_t bytes = 0, count = 0;
  /// Timed and warm-up calls per round, the same for every peer.
  int iters = 0, warmup = 0;
  double time_us = 0, algbw = 0, busbw = 0, range = 0;
  int64_t wrong = 0;
  std::vector<double> round_us, samples;
  std::vector<peer_row> peers;
};

/// Peer time / hvactor time: above 1, hvactor is faster.
inline double ratio(const row& r, const peer_row& p) {
  return r.time_us > 0 ? p.time_us / r.time_us : 0;
}

/// The sweep's options.
struct config {
  std::string kind;
  layout where;
  size_t min_bytes = 4, max_bytes = size_t{64} << 20, factor = 4;
  /// Timed and warm-up calls per size; 0 and -1: derived per size from
  /// `seconds` (at least 1000 timed calls where 1000 take less).
  int iters = 0, warmup = -1;
  double seconds = 0.5;
  /// Rounds: in each, hvactor and every peer measure all sizes in turn.
  int rounds = 4;
  /// --load: busy threads per core during the whole run.
  int load = 0;
  /// --load-kind: what those threads do.
  load_type load_kind = load_type::spin;
  /// --bind-to: core or none.
  std::string bind = "core";
  bool check = false, gpu = false;
  std::string backend = "auto";
  /// --gloo-algorithm: HVACTOR_GLOO_ALLREDUCE for hvactor and the gloo peer.
  std::string gloo_algorithm = "auto";
  std::vector<std::string> peers;
  /// --path: both (the workers and the spmd peer) or executor.
  std::string path = "both";
  /// On a cluster of hvactor-node processes the executor's workers hold
  /// the slots the SPMD job needs: its rounds run after the workers' end.
  bool spmd_after = false;
  /// The spmd peer's hvactor-run options: this run's cluster, layout,
  /// binding and environment (sweep.cpp).
  std::vector<std::string> spmd_args;
  /// The nodes of an emulated cluster the peers' ranks run on (--num-hosts
  /// > 1 inside hvactor-netcluster); empty: this machine.
  std::vector<peer_host> peer_hosts;
  std::string json, csv, plot;
  /// gnuplot, found on PATH when --plot is given.
  std::string gnuplot;
};

/// --json: every sample and the machine's description.
void write_json(const config& c, const std::vector<row>& rows, const std::vector<std::string>& nodes,
                const std::string& path);

/// --csv: one row per size.
void write_csv(const config& c, const std::vector<row>& rows);

/// --plot: busbw and time against size (gnuplot).
void plot(const config& c, const std::vector<row>& rows);

} // namespace hvactor::bench_tool
