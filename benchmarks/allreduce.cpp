// allreduce: hvactor's hvd::allreduce against two peers measured in the same
// run, in nccl-tests' columns (size count type time_us algbw busbw, busbw =
// algbw * 2(n-1)/n, GB/s = 1e9 B/s):
//   - raw Gloo: the same algorithm per size (collectives::allreduce_algorithm_policy)
//     through gloo::allreduce on a Gloo context of its own, in the same
//     worker processes, before hvd::init(): hvactor's overhead alone;
//   - Open MPI's MPI_Allreduce (allreduce_mpi, started through mpirun;
//     shared memory, and with --mpi-tcp also the TCP BTL on loopback).
// Ratios are bandwidth ratios, peer time / hvactor time: above 1, hvactor
// is faster. Then the fusion scenario: many small tensors one by one
// against one grouped_allreduce. Method: allreduce_method.hpp.
//
//   allreduce --gpu [--np 1,2]   (device memory; see allreduce_gpu.hpp)
//   allreduce --hierarchical [--max-bytes 67108864] [--budget-ms 300]
//             (2 hvactor-node processes x 2 workers: hierarchical vs flat Gloo;
//             see allreduce_hierarchical.hpp)
//   allreduce --timeline-overhead [--np 2] [--timeline-rounds 6] [--timeline-iters 2000]
//             (HOROVOD_TIMELINE off vs on; see allreduce_timeline.hpp)
//   allreduce [--np 2,4] [--min-bytes 4] [--max-bytes 268435456] [--budget-ms 500]
//             [--peers gloo,mpi] [--mpi-tcp] [--fusion-reps 20] [--csv FILE]
//             [--num-cpus C]   (the runtime's: CPUs the embedded node offers)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "allreduce_gpu.hpp"
#include "allreduce_hierarchical.hpp"
#include "allreduce_method.hpp"
#include "allreduce_mpi_peer.hpp"
#include "allreduce_report.hpp"
#include "allreduce_timeline.hpp"
#include "allreduce_worker.hpp"

using namespace hvactor::bench;

namespace {

/// The command line (parse()).
struct config {
  std::vector<int> nps;
  size_t min_bytes = 4;
  size_t max_bytes = size_t{256} << 20;
  double budget_ms = 500;
  int rounds = 3;
  bool gloo = true;
  bool mpi = true;
  bool mpi_tcp = false;
  int fusion_tensors = 200;
  size_t fusion_bytes = 16 << 10;
  int fusion_reps = 20;
  int timeout_s = 60;
  int mpi_limit_s = 600;
  std::string csv;
  bool gpu = false;
  bool timeline_overhead = false;
  int timeline_rounds = 6;
  int timeline_iters = 2000;
  bool hierarchical = false;
  bool hierarchical_child = false;
  std::string node_binary;
};

#ifdef HVACTOR_MPI_BENCH
constexpr const char* mpi_program = HVACTOR_MPI_BENCH;
constexpr const char* mpirun_path = HVACTOR_MPIRUN;
#else
constexpr const char* mpi_program = nullptr;
constexpr const char* mpirun_path = nullptr;
#endif

config parse(const std::vector<std::string>& args) {
  cxxopts::Options parser{"allreduce", "hvactor allreduce vs raw Gloo vs Open MPI"};
  parser.add_options()("np", "world sizes, comma-separated",
                       cxxopts::value<std::vector<int>>()->default_value("2,4"))(
    "min-bytes", "smallest message", cxxopts::value<size_t>()->default_value("4"))(
    "max-bytes", "largest message (powers of 4 in between)",
    cxxopts::value<size_t>()->default_value("268435456"))(
    "budget-ms", "time budget per size and implementation (sets the iterations)",
    cxxopts::value<double>()->default_value("500"))(
    "rounds", "interleaved rounds per size; each cell is the best",
    cxxopts::value<int>()->default_value("3"))(
    "peers", "baselines to run: gloo, mpi", cxxopts::value<std::vector<std::string>>()->default_value("gloo,mpi"))(
    "mpi-tcp", "also run MPI over the TCP BTL on loopback")(
    "fusion-tensors", "tensors in the fusion scenario (0: skip it)",
    cxxopts::value<int>()->default_value("200"))(
    "fusion-bytes", "bytes per fusion tensor", cxxopts::value<size_t>()->default_value("16384"))(
    "fusion-reps", "fusion repetitions (median)", cxxopts::value<int>()->default_value("20"))(
    "timeout-s", "hvactor and Gloo timeouts", cxxopts::value<int>()->default_value("60"))(
    "mpi-limit-s", "mpirun is killed after this long", cxxopts::value<int>()->default_value("600"))(
    "csv", "also write the results to this CSV file", cxxopts::value<std::string>())(
    "gpu", "device memory instead: NCCL (or host-staged) vs host Gloo, same workers")(
    "timeline-overhead", "instead: small allreduces with HOROVOD_TIMELINE off and on")(
    "timeline-rounds", "rounds of off, on, off again (--timeline-overhead)",
    cxxopts::value<int>()->default_value("6"))(
    "timeline-iters", "allreduces per 4 KiB cell; a tenth at 1 MiB (--timeline-overhead)",
    cxxopts::value<int>()->default_value("2000"))(
    "hierarchical", "instead: hierarchical vs flat Gloo on 2 hvactor-node processes x 2 "
    "workers (sizes up to --max-bytes, default here 64 MiB)")(
    "hierarchical-child", "internal: the driver of --hierarchical, joined to its cluster")(
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
  c.rounds = std::max(1, o["rounds"].as<int>());
  auto peers = o["peers"].as<std::vector<std::string>>();
  auto has = [&](const char* p) { return std::find(peers.begin(), peers.end(), p) != peers.end(); };
  c.gloo = has("gloo");
  c.mpi = has("mpi");
  c.mpi_tcp = o.count("mpi-tcp") > 0;
  c.fusion_tensors = o["fusion-tensors"].as<int>();
  c.fusion_bytes = o["fusion-bytes"].as<size_t>();
  c.fusion_reps = o["fusion-reps"].as<int>();
  c.timeout_s = o["timeout-s"].as<int>();
  c.mpi_limit_s = o["mpi-limit-s"].as<int>();
  if (o.count("csv"))
    c.csv = o["csv"].as<std::string>();
  c.gpu = o.count("gpu") > 0;
  c.timeline_overhead = o.count("timeline-overhead") > 0;
  c.timeline_rounds = o["timeline-rounds"].as<int>();
  c.timeline_iters = o["timeline-iters"].as<int>();
  c.hierarchical = o.count("hierarchical") > 0;
  c.hierarchical_child = o.count("hierarchical-child") > 0;
  c.node_binary = o["hvactor-node"].as<std::string>();
  if ((c.hierarchical || c.hierarchical_child) && o.count("max-bytes") == 0)
    c.max_bytes = size_t{64} << 20;
  return c;
}

/// A problem the reader must not miss: on stderr and, in the table, on stdout.
void loud(const std::string& message) {
  fmt::print(stderr, "!!! {}\n", message);
  fmt::print("# !!! {}\n", message);
  std::fflush(stdout);
}

/// Slowest rank's time per call and rank 0's p50; prints any rank's wrong sum.
void combine(const std::vector<size_result>& ranks, const char* what, size_t bytes, opt& us,
             opt& p50, std::string& algorithm) {
  double slowest = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto& t = ranks[r].time;
    slowest = std::max(slowest, t.loop_us / std::max(1, t.iters));
    if (!t.error.empty())
      loud(fmt::format("{} allreduce of {} B returned a WRONG SUM on rank {}: {}", what, bytes,
                       r, t.error));
  }
  us = slowest;
  p50 = ranks.at(0).time.p50_us;
  auto gloo_path = [](const std::string& a) { return a == "ring" || a == "bcube"; };
  if (algorithm.empty() || !gloo_path(ranks[0].algorithm))
    algorithm = ranks[0].algorithm;
  else if (gloo_path(algorithm) && algorithm != ranks[0].algorithm)
    loud(fmt::format("{} ran {} at {} B, the other path {}", what, ranks[0].algorithm, bytes,
                     algorithm));
}

void add_mpi(const config& cfg, int n, bool tcp, std::map<size_t, row>& rows) {
  mpi_request req{mpirun_path, mpi_program, n, tcp, cfg.min_bytes, cfg.max_bytes,
                  cfg.budget_ms, std::chrono::seconds{cfg.mpi_limit_s}};
  std::string cmd;
  for (auto& a : mpi_command(req))
    cmd += (cmd.empty() ? "" : " ") + a;
  fmt::print("# mpi{}: {}\n", tcp ? "-tcp" : "", cmd);
  std::fflush(stdout);
  auto sweep = run_mpi_peer(req);
  for (auto& e : sweep.errors)
    loud(fmt::format("mpi{} peer at N={}: {}", tcp ? "-tcp" : "", n, e));
  for (auto& [bytes, p] : sweep.points) {
    if (!rows.count(bytes))
      continue;
    (tcp ? rows[bytes].tcp_us : rows[bytes].mpi_us) = p.time_us;
    (tcp ? rows[bytes].tcp_p50 : rows[bytes].mpi_p50) = p.p50_us;
  }
}

/// A fresh empty directory for one Gloo FileStore, removed on scope exit.
struct temp_dir {
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hvactor-allreduce-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("cannot create a temporary directory for the Gloo FileStore");
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

void run_world(hvactor::runtime& rt, const config& cfg, int n, std::FILE* csv) {
  fmt::print("\n# ==== allreduce, N={} ranks, float, sum, in place; time_us = slowest rank's "
             "loop / iterations; GB/s = 1e9 B/s ====\n", n);
  std::map<size_t, row> rows;
  for (size_t bytes : message_sizes(cfg.min_bytes, cfg.max_bytes))
    rows[bytes].bytes = bytes;
  if (cfg.mpi && mpi_program != nullptr) {
    add_mpi(cfg, n, false, rows);
    if (cfg.mpi_tcp)
      add_mpi(cfg, n, true, rows);
  } else {
    fmt::print("# mpi: {}\n", mpi_program ? "not requested (--peers)" : "not built");
  }

  hvactor::settings s;
  s.timeout = std::chrono::seconds{cfg.timeout_s};
  hvactor::executor ex{rt, s, {.num_workers = n}};
  ex.start<allreduce_worker>();
  auto best = [](opt& acc, opt v) {
    if (v && (!acc || *v < *acc))
      acc = v;
  };
  // Raw Gloo first, on its own, then its context is closed: Gloo's loop
  // threads spin for a while after bcube calls, and on 2 cores they slowed
  // hvactor's shared-memory calls that ran next to them by up to 4x (the
  // two paths used to alternate size by size). Each cell is the best of
  // the rounds.
  std::optional<temp_dir> store;
  if (cfg.gloo) {
    store.emplace();
    fmt::print("# raw gloo: gloo::allreduce on a context of its own, FileStore {}; measured "
               "first, then closed\n",
               store->path);
    ex.execute(&allreduce_worker::gloo_connect, store->path, int64_t{cfg.timeout_s} * 1000);
    for (int round = 0; round < cfg.rounds; ++round)
      for (auto& [bytes, r] : rows) {
        opt us, p50;
        auto g = ex.execute(&allreduce_worker::gloo_measure, uint64_t{bytes}, cfg.budget_ms);
        combine(g, "raw gloo", bytes, us, p50, r.algorithm);
        best(r.gloo_us, us);
        best(r.gloo_p50, p50);
      }
    ex.execute(&allreduce_worker::gloo_close);
  }
  ex.execute(&allreduce_worker::hvd_init);
  fmt::print("# hvactor: {}\n", ex.execute(&allreduce_worker::hvd_backend_info).at(0));
  fmt::print("# each cell: best of {} rounds\n", cfg.rounds);
  for (int round = 0; round < cfg.rounds; ++round)
    for (auto& [bytes, r] : rows) {
      opt us, p50;
      auto h = ex.execute(&allreduce_worker::hvd_measure, uint64_t{bytes}, cfg.budget_ms);
      combine(h, "hvactor", bytes, us, p50, r.algorithm);
      best(r.hv_us, us);
      best(r.hv_p50, p50);
    }
  print_header(cfg.mpi_tcp);
  for (auto& [bytes, r] : rows) {
    print_row(cfg.mpi_tcp, n, r);
    csv_row(csv, n, "allreduce", bytes, r.algorithm, r.hv_us, r.hv_p50, &r);
  }
  print_latency(cfg.mpi_tcp, rows);

  opt speedup;
  if (cfg.fusion_tensors > 0 && cfg.fusion_reps > 0) {
    auto res = ex.execute(&allreduce_worker::hvd_fusion, int32_t{cfg.fusion_tensors},
                          uint64_t{cfg.fusion_bytes}, int32_t{cfg.fusion_reps});
    double separate = 0, grouped = 0;
    for (size_t r = 0; r < res.size(); ++r) {
      separate = std::max(separate, res[r].separate_us);
      grouped = std::max(grouped, res[r].grouped_us);
      if (!res[r].error.empty())
        loud(fmt::format("fused allreduce returned a WRONG SUM on rank {}: {}", r, res[r].error));
    }
    speedup = ratio(separate, grouped);
    size_t total = cfg.fusion_bytes * static_cast<size_t>(cfg.fusion_tensors);
    fmt::print("\n# fusion, N={}: {} tensors x {} B float, median of {} (slowest rank)\n", n,
               cfg.fusion_tensors, cfg.fusion_bytes, cfg.fusion_reps);
    fmt::print("#   {} separate hvd::allreduce: {:>10.1f} us\n", cfg.fusion_tensors, separate);
    fmt::print("#   one hvd::grouped_allreduce:   {:>10.1f} us\n", grouped);
    fmt::print("#   speedup:                      {:>10.2f}x\n", speedup.value_or(0));
    csv_row(csv, n, "fusion_separate", total, "", separate, {}, nullptr);
    csv_row(csv, n, "fusion_grouped", total, "", grouped, {}, nullptr);
  }
  print_targets(n, rows, speedup);
  ex.execute(&allreduce_worker::hvd_finish);
  ex.shutdown();
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns. 16 CPUs offered, so that 4 (or
  // more) single-CPU workers fit on a small machine; --num-cpus overrides.
  hvactor::runtime rt{argc, argv, {.num_cpus = 16}};
  auto cfg = parse(rt.args());
  if (cfg.gpu)
    return run_gpu_benchmark(rt, cfg.nps, cfg.min_bytes, cfg.max_bytes, cfg.budget_ms);
  if (cfg.hierarchical || cfg.hierarchical_child) {
    hierarchical_config h{cfg.min_bytes, cfg.max_bytes, cfg.budget_ms, std::min(cfg.rounds, 2),
                          cfg.timeout_s};
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
  std::FILE* csv = nullptr;
  if (!cfg.csv.empty()) {
    csv = std::fopen(cfg.csv.c_str(), "w");
    if (csv == nullptr) {
      fmt::print(stderr, "allreduce: cannot write {}\n", cfg.csv);
      return 2;
    }
    csv_header(csv);
  }
  const char* forced = std::getenv("HVACTOR_GLOO_ALLREDUCE");
  fmt::print("# hvactor allreduce benchmark: {} cores, budget {} ms per size, sizes {}..{} B, "
             "algorithm {}, mpi peer {}\n",
             std::max(1u, std::thread::hardware_concurrency()), cfg.budget_ms, cfg.min_bytes,
             cfg.max_bytes,
             forced ? fmt::format("forced: {}", forced) : "automatic (allreduce_algorithm_policy)",
             mpi_program ? mpi_program : "not built");
  int failures = 0;
  for (int n : cfg.nps) {
    try {
      run_world(rt, cfg, n, csv);
    } catch (const std::exception& e) {
      ++failures;
      loud(fmt::format("allreduce benchmark at N={} failed: {}", n, e.what()));
    }
  }
  if (csv != nullptr)
    std::fclose(csv);
  return failures == 0 ? 0 : 1;
}
