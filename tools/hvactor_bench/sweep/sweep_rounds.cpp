#include "tools/hvactor_bench/sweep/sweep_rounds.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "tools/hvactor_bench/sweep/collective.hpp"

namespace hvactor::bench_tool {

namespace {

// hvactor's round: every size in turn, in the job's warm workers.
void hvactor_round(hvactor::executor& ex, const config& c, const std::vector<peer_size>& counts,
                   std::vector<row>& rows, std::string& path_info, progress& line,
                   const std::string& step) {
  for (size_t k = 0; k < counts.size(); ++k) {
    line.show(fmt::format("{}, {} B ({}/{}): hvactor", step, counts[k].bytes, k + 1, counts.size()));
    auto points = ex.run(&measure_point, c.kind, uint64_t{counts[k].bytes},
                         int32_t{counts[k].iters}, int32_t{counts[k].warmup}, c.check, c.gpu);
    double us = 0;
    for (auto& p : points) {
      us = std::max(us, p.loop_us / std::max(1, p.iters));
      rows[k].wrong += p.wrong;
    }
    rows[k].round_us.push_back(us);
    auto& s = points.at(0).samples_us;
    rows[k].samples.insert(rows[k].samples.end(), s.begin(), s.end());
    path_info = points.at(0).path;
  }
}

// A peer's round: one job over every size.
void peer_round(const config& c, const std::string& name, const std::vector<peer_size>& counts,
                const std::vector<double>& call_us, std::vector<row>& rows, size_t column) {
  double expected_s = 0;
  for (size_t k = 0; k < counts.size(); ++k)
    expected_s += (counts[k].iters + counts[k].warmup + 2) * call_us[k] / 1e6;
  peer_request req{name, c.kind, c.where.np, counts, c.check, c.bind == "core"};
  // A peer may be far slower than hvactor (raw Gloo's small sizes: 100x).
  req.limit = std::chrono::seconds(300 + static_cast<long>(50 * expected_s));
  req.gloo_algorithm = c.gloo_algorithm;
  req.hosts = c.peer_hosts;
  req.per_host = c.where.per_host;
  req.launcher_args = c.spmd_args;
  auto points = run_peer(req);
  for (size_t k = 0; k < counts.size(); ++k) {
    auto& pr = rows[k].peers[column];
    pr.round_us.push_back(points[k].time_us);
    pr.wrong += points[k].wrong;
    pr.samples.insert(pr.samples.end(), points[k].samples_us.begin(), points[k].samples_us.end());
  }
}

// Median, range and bandwidths over the rounds.
void summarize(const config& c, row& r) {
  auto settle = [](std::vector<double>& rounds, double& time_us, double& range,
                   std::vector<double>& samples) {
    time_us = bench::median(rounds);
    auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end());
    range = time_us > 0 ? (*hi - *lo) / time_us : 0;
    samples = thin_samples(samples);
  };
  double factor = bus_factor(c.kind, c.where.np);
  settle(r.round_us, r.time_us, r.range, r.samples);
  r.algbw = r.time_us > 0 ? static_cast<double>(r.bytes) / (r.time_us * 1e3) : 0;
  r.busbw = r.algbw * factor;
  for (auto& p : r.peers) {
    settle(p.round_us, p.time_us, p.range, p.samples);
    p.busbw = p.time_us > 0 ? static_cast<double>(r.bytes) / (p.time_us * 1e3) * factor : 0;
  }
}

} // namespace

/// Timed calls per size for `call_us` per call: `seconds`' worth, at least
/// 1000 where 1000 take less (at most 100000), at least 5.
int auto_iters(double call_us, double seconds) {
  if (call_us * 1000 <= seconds * 1e6)
    return 1000;
  return static_cast<int>(std::max(std::ceil(seconds * 1e6 / call_us), 5.0));
}

// The warm-up round: a few untimed hvactor calls of every size (the first
// calls pay for connections, page faults and sleeping peers), whose times
// give each size's call counts, the same for hvactor and every peer.
std::vector<peer_size> call_counts(hvactor::executor& ex, const config& c,
                                   const std::vector<size_t>& sizes, progress& line,
                                   std::vector<double>& call_us) {
  std::vector<peer_size> out;
  for (size_t k = 0; k < sizes.size(); ++k) {
    line.show(fmt::format("[{}] warm-up {} B ({}/{})", c.kind, sizes[k], k + 1, sizes.size()));
    // The median of 10 calls: one slow call (a page fault, a rank not yet
    // scheduled) must not cut the count of a fast size.
    auto points = ex.run(&measure_point, c.kind, uint64_t{sizes[k]}, int32_t{10}, int32_t{3}, false,
                         c.gpu);
    double us = 0;
    for (auto& p : points)
      us = std::max(us, bench::median(p.samples_us));
    call_us.push_back(us);
    int iters = c.iters > 0 ? c.iters : auto_iters(us, c.seconds);
    out.push_back({sizes[k], iters, c.warmup >= 0 ? c.warmup : std::max(5, iters / 10)});
  }
  return out;
}

// Every round: hvactor and the peers, the order rotating by one each round
// so that no implementation always runs first (or right after another).
std::vector<row> measure_rounds(hvactor::executor& ex, const config& c,
                                const std::vector<peer_size>& counts,
                                const std::vector<double>& call_us, progress& line,
                                std::string& path_info,
                                const std::function<void()>& release_workers) {
  std::vector<row> rows(counts.size());
  for (size_t k = 0; k < counts.size(); ++k) {
    rows[k].bytes = counts[k].bytes;
    rows[k].count = counts[k].bytes / 4;
    rows[k].iters = counts[k].iters;
    rows[k].warmup = counts[k].warmup;
    for (auto& name : c.peers)
      rows[k].peers.push_back(peer_row{name});
  }
  // Who takes part in the rotation: hvactor (0) and the peers (1..).
  std::vector<size_t> turn{0};
  size_t later = 0; // the spmd peer's column + 1 when its rounds come after
  for (size_t i = 0; i < c.peers.size(); ++i)
    if (c.spmd_after && c.peers[i] == "spmd")
      later = i + 1;
    else
      turn.push_back(i + 1);
  size_t n = turn.size();
  for (int r = 0; r < c.rounds; ++r) {
    for (size_t i = 0; i < n; ++i) {
      size_t who = turn[(i + static_cast<size_t>(r)) % n];
      auto name = who == 0 ? std::string{"hvactor"} : c.peers[who - 1];
      auto step = fmt::format("[{}] round {}/{}", c.kind, r + 1, c.rounds);
      line.show(step + ": " + name);
      if (who == 0)
        hvactor_round(ex, c, counts, rows, path_info, line, step);
      else
        peer_round(c, name, counts, call_us, rows, who - 1);
    }
  }
  if (later > 0) {
    release_workers();
    for (int r = 0; r < c.rounds; ++r) {
      line.show(fmt::format("[{}] round {}/{}: spmd (after the workers)", c.kind, r + 1, c.rounds));
      peer_round(c, "spmd", counts, call_us, rows, later - 1);
    }
  }
  for (auto& r : rows)
    summarize(c, r);
  return rows;
}

} // namespace hvactor::bench_tool
