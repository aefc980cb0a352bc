#include "allreduce_hierarchical.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <hvactor/hvactor.hpp>

#include "bench_method.hpp"
#include "allreduce_worker.hpp"
#include "local_cluster.hpp"

namespace hvactor::bench {

namespace {

struct cell {
  std::optional<double> us, p50;
  void take(const std::vector<size_result>& ranks) {
    double slowest = 0;
    for (auto& r : ranks) {
      slowest = std::max(slowest, r.time.loop_us / std::max(1, r.time.iters));
      if (!r.time.error.empty())
        fmt::print("# !!! WRONG SUM: {}\n", r.time.error);
    }
    if (!us || slowest < *us)
      us = slowest;
    if (!p50 || ranks.at(0).time.p50_us < *p50)
      p50 = ranks.at(0).time.p50_us;
  }
};

struct sweep {
  std::map<size_t, cell> cells;
  std::string info;
};

void measure(hvactor::runtime& rt, const hierarchical_config& cfg,
             const std::map<std::string, std::string>& env, sweep& out) {
  hvactor::settings s;
  s.timeout = std::chrono::seconds{cfg.timeout_s};
  hvactor::executor ex{rt, s, {.num_hosts = 2, .num_workers_per_host = 2, .extra_env_vars = env}};
  ex.start<allreduce_worker>();
  ex.execute(&allreduce_worker::hvd_init);
  out.info = ex.execute(&allreduce_worker::hvd_backend_info).at(0);
  for (size_t bytes : message_sizes(cfg.min_bytes, cfg.max_bytes))
    out.cells[bytes].take(ex.execute(&allreduce_worker::hvd_measure, uint64_t{bytes},
                                     cfg.budget_ms));
  ex.execute(&allreduce_worker::hvd_finish);
  ex.shutdown();
}

std::string gbps(size_t bytes, std::optional<double> us) {
  if (!us || *us <= 0)
    return "n/a";
  return fmt::format("{:.3f}", static_cast<double>(bytes) / (*us * 1e3) * bus_factor("allreduce", 4));
}

} // namespace

int run_hierarchical_parent(const std::string& node_binary,
                            const std::vector<std::string>& child_args) {
  auto dir = make_temp_dir("hvactor-allreduce-hier");
  int rc = 1;
  try {
    local_cluster cluster{{node_binary, 2, 2, dir + "/cluster"}};
    std::string self = std::filesystem::read_symlink("/proc/self/exe");
    std::vector<std::string> argv{self, "--address", cluster.address(), "--hierarchical-child"};
    argv.insert(argv.end(), child_args.begin(), child_args.end());
    auto pid = spawn_process(argv);
    rc = wait_process(pid, std::chrono::minutes(30));
    if (rc == -1)
      rc = stop_process(pid);
    cluster.stop();
  } catch (const std::exception& e) {
    fmt::print(stderr, "allreduce --hierarchical: {}\n", e.what());
  }
  remove_dir(dir);
  return rc;
}

int run_hierarchical_child(hvactor::runtime& rt, const hierarchical_config& cfg) {
  fmt::print("\n# ==== hierarchical vs flat Gloo: 2 hvactor-node processes x 2 workers, float "
             "sum, in place; best of {} rounds, jobs alternating ====\n",
             cfg.rounds);
  sweep hier, flat;
  for (int round = 0; round < cfg.rounds; ++round) {
    measure(rt, cfg, {}, hier);
    measure(rt, cfg, {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}}, flat);
  }
  fmt::print("# hierarchical: {}\n# flat:         {}\n", hier.info, flat.info);
  fmt::print("# {:>10} | {:>12} {:>8} {:>10} | {:>12} {:>8} {:>10} | {:>10} {:>10}\n", "size",
             "hier us", "busbw", "hier p50", "flat us", "busbw", "flat p50", "flat/hier",
             "p50 ratio");
  for (auto& [bytes, h] : hier.cells) {
    auto& f = flat.cells[bytes];
    auto ratio = [](std::optional<double> a, std::optional<double> b) {
      return a && b && *b > 0 ? fmt::format("{:.2f}", *a / *b) : std::string{"n/a"};
    };
    fmt::print("  {:>10} | {:>12.1f} {:>8} {:>10.1f} | {:>12.1f} {:>8} {:>10.1f} | {:>10} {:>10}\n",
               bytes, h.us.value_or(0), gbps(bytes, h.us), h.p50.value_or(0), f.us.value_or(0),
               gbps(bytes, f.us), f.p50.value_or(0), ratio(f.us, h.us), ratio(f.p50, h.p50));
  }
  return 0;
}

} // namespace hvactor::bench
