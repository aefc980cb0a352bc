// allreduce: the scenarios hvactor-bench does not cover. The size sweep and
// its peers (Open MPI, raw Gloo, torch.distributed) are
// `hvactor-bench allreduce --peer mpi,gloo,torch`, device memory is
// `hvactor-bench allreduce --device gpu`; what stays here:
//
//   allreduce [--np 2,4] [--fusion-tensors 200] [--fusion-bytes 16384] [--fusion-reps 20]
//             (tensor fusion: many small tensors one by one against one
//             grouped_allreduce)
//   allreduce --timeline-overhead [--np 2] [--timeline-rounds 6] [--timeline-iters 2000]
//             (HOROVOD_TIMELINE off vs on; see allreduce_timeline.hpp)
//   allreduce --hierarchical [--max-bytes 67108864] [--budget-ms 300]
//             (2 hvactor-node processes x 2 workers: hierarchical vs flat Gloo;
//             see allreduce_hierarchical.hpp)
//
// Method: tools/common/bench_method.hpp.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "allreduce_hierarchical.hpp"
#include "bench_method.hpp"
#include "allreduce_timeline.hpp"
#include "allreduce_worker.hpp"

using namespace hvactor::bench;

namespace {

/// The command line (parse()).
struct config {
  std::vector<int> nps;
  size_t min_bytes = 4;
  size_t max_bytes = size_t{64} << 20;
  double budget_ms = 300;
  int rounds = 2;
  int fusion_tensors = 200;
  size_t fusion_bytes = 16 << 10;
  int fusion_reps = 20;
  int timeout_s = 60;
  bool timeline_overhead = false;
  int timeline_rounds = 6;
  int timeline_iters = 2000;
  bool hierarchical = false;
  bool hierarchical_child = false;
  std::string node_binary;
};

config parse(const std::vector<std::string>& args) {
  cxxopts::Options parser{"allreduce", "hvactor's fusion, timeline overhead and hierarchical "
                                       "allreduce scenarios (the sweep: hvactor-bench allreduce)"};
  parser.add_options()("np", "world sizes, comma-separated",
                       cxxopts::value<std::vector<int>>()->default_value("2,4"))(
    "fusion-tensors", "tensors in the fusion scenario", cxxopts::value<int>()->default_value("200"))(
    "fusion-bytes", "bytes per fusion tensor", cxxopts::value<size_t>()->default_value("16384"))(
    "fusion-reps", "fusion repetitions (median)", cxxopts::value<int>()->default_value("20"))(
    "timeout-s", "hvactor's collective timeout", cxxopts::value<int>()->default_value("60"))(
    "timeline-overhead", "instead: small allreduces with HOROVOD_TIMELINE off and on")(
    "timeline-rounds", "rounds of off, on, off again (--timeline-overhead)",
    cxxopts::value<int>()->default_value("6"))(
    "timeline-iters", "allreduces per 4 KiB cell; a tenth at 1 MiB (--timeline-overhead)",
    cxxopts::value<int>()->default_value("2000"))(
    "hierarchical", "instead: hierarchical vs flat Gloo on 2 hvactor-node processes x 2 workers")(
    "hierarchical-child", "internal: the driver of --hierarchical, joined to its cluster")(
    "min-bytes", "smallest message (--hierarchical)", cxxopts::value<size_t>()->default_value("4"))(
    "max-bytes", "largest message, powers of 4 in between (--hierarchical)",
    cxxopts::value<size_t>()->default_value("67108864"))(
    "budget-ms", "time budget per size (--hierarchical; sets the iterations)",
    cxxopts::value<double>()->default_value("300"))(
    "rounds", "interleaved rounds per size, the best kept (--hierarchical)",
    cxxopts::value<int>()->default_value("2"))(
    "hvactor-node", "path of hvactor-node (--hierarchical)",
    cxxopts::value<std::string>()->default_value(HVACTOR_NODE_BIN))(
    "h,help", "this text");
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  auto o = parser.parse(static_cast<int>(argv.size()), argv.data());
  if (o.count("help")) {
    std::printf("%s\n", parser.help().c_str());
    std::exit(0);
  }
  config c;
  c.nps = o["np"].as<std::vector<int>>();
  c.min_bytes = o["min-bytes"].as<size_t>();
  c.max_bytes = o["max-bytes"].as<size_t>();
  c.budget_ms = o["budget-ms"].as<double>();
  c.rounds = std::clamp(o["rounds"].as<int>(), 1, 2);
  c.fusion_tensors = std::max(1, o["fusion-tensors"].as<int>());
  c.fusion_bytes = std::max<size_t>(4, o["fusion-bytes"].as<size_t>());
  c.fusion_reps = std::max(1, o["fusion-reps"].as<int>());
  c.timeout_s = o["timeout-s"].as<int>();
  c.timeline_overhead = o.count("timeline-overhead") > 0;
  c.timeline_rounds = o["timeline-rounds"].as<int>();
  c.timeline_iters = o["timeline-iters"].as<int>();
  c.hierarchical = o.count("hierarchical") > 0;
  c.hierarchical_child = o.count("hierarchical-child") > 0;
  c.node_binary = o["hvactor-node"].as<std::string>();
  return c;
}

/// The fusion scenario at `n` ranks; false when a result was wrong.
bool run_fusion(hvactor::runtime& rt, const config& cfg, int n) {
  hvactor::settings s;
  s.timeout = std::chrono::seconds{cfg.timeout_s};
  hvactor::executor ex{rt, s, {.num_workers = n}};
  ex.start<allreduce_worker>();
  ex.execute(&allreduce_worker::hvd_init);
  auto res = ex.execute(&allreduce_worker::hvd_fusion, int32_t{cfg.fusion_tensors},
                        uint64_t{cfg.fusion_bytes}, int32_t{cfg.fusion_reps});
  fmt::print("\n# fusion, N={}: {} tensors x {} B float, median of {} (slowest rank); {}\n", n,
             cfg.fusion_tensors, cfg.fusion_bytes, cfg.fusion_reps,
             ex.execute(&allreduce_worker::hvd_backend_info).at(0));
  ex.execute(&allreduce_worker::hvd_finish);
  ex.shutdown();
  double separate = 0, grouped = 0;
  bool ok = true;
  for (size_t r = 0; r < res.size(); ++r) {
    separate = std::max(separate, res[r].separate_us);
    grouped = std::max(grouped, res[r].grouped_us);
    if (!res[r].error.empty()) {
      fmt::print(stderr, "!!! fused allreduce returned a WRONG SUM on rank {}: {}\n", r,
                 res[r].error);
      ok = false;
    }
  }
  fmt::print("#   {} separate hvd::allreduce: {:>10.1f} us\n", cfg.fusion_tensors, separate);
  fmt::print("#   one hvd::grouped_allreduce:   {:>10.1f} us\n", grouped);
  fmt::print("#   speedup:                      {:>10.2f}x\n", grouped > 0 ? separate / grouped : 0);
  std::fflush(stdout);
  return ok;
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns. 16 CPUs offered, so that 4 (or
  // more) single-CPU workers fit on a small machine; --num-cpus overrides.
  hvactor::runtime rt{argc, argv, {.num_cpus = 16}};
  auto cfg = parse(rt.args());
  if (cfg.hierarchical || cfg.hierarchical_child) {
    hierarchical_config h{cfg.min_bytes, cfg.max_bytes, cfg.budget_ms, cfg.rounds, cfg.timeout_s};
    if (cfg.hierarchical_child)
      return run_hierarchical_child(rt, h);
    return run_hierarchical_parent(
      cfg.node_binary, {"--min-bytes", std::to_string(cfg.min_bytes), "--max-bytes",
                        std::to_string(cfg.max_bytes), "--budget-ms",
                        fmt::format("{}", cfg.budget_ms), "--rounds", std::to_string(h.rounds)});
  }
  if (cfg.timeline_overhead)
    return run_timeline_overhead(rt, cfg.nps, cfg.timeline_rounds, cfg.timeline_iters,
                                 cfg.timeout_s);
  int failures = 0;
  for (int n : cfg.nps) {
    try {
      failures += run_fusion(rt, cfg, n) ? 0 : 1;
    } catch (const std::exception& e) {
      ++failures;
      fmt::print(stderr, "!!! fusion at N={} failed: {}\n", n, e.what());
    }
  }
  return failures == 0 ? 0 : 1;
}
