// cluster_start: start() of 3 nodes x 4 workers on a local cluster of real
// hvactor-node processes (head + 2 nodes), against the same 12-worker
// start() on the embedded local cluster, measured in the same run.
//
// The program is its own driver. The runtime must be created first thing in
// main (worker processes re-run this binary and never leave its
// constructor), before the cluster's port is known; so:
//   parent (no --child): starts the cluster, runs a child per setup, prints
//     the table, stops and reaps the nodes, removes its temp dir;
//   child --child cluster --address 127.0.0.1:PORT: R cycles of
//     start / run(&trivial_fn) / shutdown on the cluster (the first cycle
//     ships the binary: the nodes' work dirs are fresh);
//   child --child embedded --num-cpus 12: the same on the embedded cluster.
//
//   cluster_start [--reps 10] [--pause-ms 0] [--hvactor-node PATH]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "local_cluster.hpp"

using clock_type = std::chrono::steady_clock;

namespace {

int trivial_fn() {
  return 0;
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

struct cycle {
  double start_ms = 0;
  double call_ms = 0;
  double shutdown_ms = 0;
  uint64_t shipped = 0;
};

// -- child: the measurements ---------------------------------------------

int run_child(hvactor::runtime& rt, const std::string& setup, int reps, int pause_ms,
              const std::string& result_file) {
  std::ofstream out{result_file};
  hvactor::executor_options opts;
  if (setup == "cluster") {
    opts.num_hosts = 3;
    opts.num_workers_per_host = 4;
  } else {
    opts.num_workers = 12; // one node: PACK
  }
  auto settings = hvactor::executor::create_settings({});
  for (int i = 0; i < reps; ++i) {
    if (i > 0 && pause_ms > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    try {
      hvactor::executor ex{rt, settings, opts};
      auto t0 = clock_type::now();
      ex.start();
      auto t1 = clock_type::now();
      auto results = ex.run(&trivial_fn);
      auto t2 = clock_type::now();
      if (results.size() != 12)
        throw std::runtime_error(fmt::format("run() answered {} results, not 12", results.size()));
      auto shipped = ex.shipped_bytes(); // throws once shut down
      ex.shutdown();
      auto t3 = clock_type::now();
      auto ms = [](auto a, auto b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      };
      out << fmt::format("cycle {} {:.3f} {:.3f} {:.3f} {}\n", i, ms(t0, t1), ms(t1, t2),
                         ms(t2, t3), shipped);
      out.flush();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cluster_start (%s) cycle %d failed: %s\n", setup.c_str(), i,
                   e.what());
      return 1;
    }
  }
  return 0;
}

// -- parent: cluster, children, table ------------------------------------

std::vector<cycle> read_cycles(const std::string& path) {
  std::vector<cycle> out;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields{line};
    std::string tag;
    int index = 0;
    cycle c;
    if (fields >> tag >> index >> c.start_ms >> c.call_ms >> c.shutdown_ms >> c.shipped)
      out.push_back(c);
  }
  return out;
}

struct summary {
  double p50 = 0, min = 0, max = 0;
  size_t n = 0;
};

summary summarize(std::vector<double> v) {
  summary s;
  s.n = v.size();
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  s.p50 = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

template <class F>
std::vector<double> column(const std::vector<cycle>& cs, size_t from, F f) {
  std::vector<double> out;
  for (size_t i = from; i < cs.size(); ++i)
    out.push_back(f(cs[i]));
  return out;
}

void row(const std::string& setup, const std::string& phase, const summary& s) {
  if (s.n == 0) {
    std::printf("| %-30s | %-28s | %3s | %9s | %9s | %9s |\n", setup.c_str(), phase.c_str(),
                "0", "n/a", "n/a", "n/a");
    return;
  }
  std::printf("| %-30s | %-28s | %3zu | %9.1f | %9.1f | %9.1f |\n", setup.c_str(),
              phase.c_str(), s.n, s.p50, s.min, s.max);
}

int run_setup(const std::string& self_exe, const std::vector<std::string>& extra,
              const std::string& setup, int reps, int pause_ms, const std::string& result_file) {
  std::vector<std::string> argv{self_exe};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"--child", setup, "--reps", std::to_string(reps), "--pause-ms",
                           std::to_string(pause_ms), "--result-file", result_file});
  auto pid = hvactor::bench::spawn_process(argv);
  int rc = hvactor::bench::wait_process(pid, std::chrono::minutes(10));
  if (rc == -1)
    rc = hvactor::bench::stop_process(pid);
  return rc;
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

uint64_t file_size(const std::string& path) {
  std::ifstream in{path, std::ios::binary | std::ios::ate};
  return in ? static_cast<uint64_t>(in.tellg()) : 0;
}

/// One setup's start (cycles 2..R), first call and shutdown.
struct setup_summary {
  summary start, call, stop;
};

// One setup's rows: its first start, then the later starts, the first
// call and the shutdown of every cycle.
setup_summary setup_rows(const std::string& setup, const char* first, const char* later,
                         const std::vector<cycle>& cycles) {
  if (!cycles.empty())
    row(setup, first, summarize({cycles[0].start_ms}));
  setup_summary out{summarize(column(cycles, 1, [](const cycle& c) { return c.start_ms; })),
                    summarize(column(cycles, 0, [](const cycle& c) { return c.call_ms; })),
                    summarize(column(cycles, 0, [](const cycle& c) { return c.shutdown_ms; }))};
  row(setup, later, out.start);
  row(setup, "first run(&trivial_fn)", out.call);
  row(setup, "shutdown", out.stop);
  return out;
}

// The table: each phase's p50/min/max for the cluster and the embedded
// peer, their ratios, and the bytes shipped.
void print_table(const std::vector<cycle>& cluster_cycles,
                 const std::vector<cycle>& embedded_cycles) {
  std::printf("| %-30s | %-28s | %3s | %9s | %9s | %9s |\n", "setup", "phase", "n", "p50_ms",
              "min_ms", "max_ms");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(32, '-').c_str(),
              std::string(30, '-').c_str(), std::string(5, '-').c_str(),
              std::string(11, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str());
  auto [cs, cc, cd] = setup_rows("cluster 3 nodes x 4", "cold start (ships binary)",
                                  "warm start (cached)", cluster_cycles);
  auto [es, ec, ed] = setup_rows("embedded 1 node x 12", "first start", "start (cycles 2..R)",
                                 embedded_cycles);
  auto ratio = [](const summary& a, const summary& b) {
    return a.n && b.n && b.p50 > 0 ? fmt::format("{:.2f}x", a.p50 / b.p50) : std::string{"n/a"};
  };
  std::printf("\ncluster / embedded (p50): warm start %s, first call %s, shutdown %s\n",
              ratio(cs, es).c_str(), ratio(cc, ec).c_str(), ratio(cd, ed).c_str());
  if (!cluster_cycles.empty()) {
    uint64_t warm = 0;
    for (size_t i = 1; i < cluster_cycles.size(); ++i)
      warm += cluster_cycles[i].shipped;
    std::printf("shipped_bytes: cold cycle %llu (%.1f MB), warm cycles %llu in all; cold - "
                "warm p50 start = %.1f ms\n",
                static_cast<unsigned long long>(cluster_cycles[0].shipped),
                static_cast<double>(cluster_cycles[0].shipped) / 1e6,
                static_cast<unsigned long long>(warm), cluster_cycles[0].start_ms - cs.p50);
  }
  if (!embedded_cycles.empty())
    std::printf("embedded shipped_bytes: %llu\n",
                static_cast<unsigned long long>(embedded_cycles[0].shipped));
}

int run_parent(const std::string& node_binary, int reps, int pause_ms) {
  std::string self_exe = std::filesystem::read_symlink("/proc/self/exe");
  auto dir = hvactor::bench::make_temp_dir("hvactor-cluster-start");
  int rc = 0;
  std::vector<cycle> cluster_cycles, embedded_cycles;
  int cluster_rc = 0, embedded_rc = 0;
  double cluster_up_ms = 0;
  try {
    auto t0 = clock_type::now();
    hvactor::bench::local_cluster cluster{{node_binary, 3, 4, dir + "/cluster"}};
    cluster_up_ms = ms_since(t0);
    cluster_rc = run_setup(self_exe, {"--address", cluster.address()}, "cluster", reps,
                           pause_ms, dir + "/cluster.txt");
    cluster.stop();
    cluster_cycles = read_cycles(dir + "/cluster.txt");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster_start: %s\n", e.what());
    rc = 1;
  }
  embedded_rc = run_setup(self_exe, {"--num-cpus", "12"}, "embedded", reps, pause_ms,
                          dir + "/embedded.txt");
  embedded_cycles = read_cycles(dir + "/embedded.txt");
  hvactor::bench::remove_dir(dir);

  std::printf("hvactor cluster start: head + 2 hvactor-node processes x 4 CPUs, 3 hosts x 4 "
              "workers = 12 workers; peer: embedded cluster (--num-cpus 12), 12 workers "
              "(PACK); %u cores (load %s), %d cycles each, %d ms pause between cycles\n",
              std::max(1u, std::thread::hardware_concurrency()), load_average().c_str(), reps,
              pause_ms);
  std::printf("driver binary (shipped on the cold start): %s, %llu bytes; local cluster up "
              "in %.0f ms (not measured below)\n\n",
              self_exe.c_str(), static_cast<unsigned long long>(file_size(self_exe)),
              cluster_up_ms);
  print_table(cluster_cycles, embedded_cycles);
  if (cluster_rc != 0 || embedded_rc != 0) {
    std::printf("child exit codes: cluster %d, embedded %d (see stderr)\n", cluster_rc,
                embedded_rc);
    rc = 1;
  }
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv};
  cxxopts::Options parser{"cluster_start", "start() on a 3-node local cluster vs embedded"};
  // clang-format off
  parser.add_options()
    ("reps", "start/run/shutdown cycles per setup", cxxopts::value<int>()->default_value("10"))
    ("hvactor-node", "path of hvactor-node", cxxopts::value<std::string>()->default_value(HVACTOR_NODE_BIN))
    ("pause-ms", "pause between cycles (0: back to back)", cxxopts::value<int>()->default_value("0"))
    ("child", "internal: cluster | embedded", cxxopts::value<std::string>()->default_value(""))
    ("result-file", "internal: where a child writes its cycles", cxxopts::value<std::string>()->default_value(""))
    ("h,help", "print this help");
  // clang-format on
  std::vector<char*> rest;
  for (auto& a : rt.args())
    rest.push_back(const_cast<char*>(a.c_str()));
  auto opts = parser.parse(static_cast<int>(rest.size()), rest.data());
  if (opts.count("help")) {
    std::printf("%s\n", parser.help().c_str());
    return 0;
  }
  int reps = std::max(2, opts["reps"].as<int>());
  int pause_ms = std::max(0, opts["pause-ms"].as<int>());
  auto child = opts["child"].as<std::string>();
  if (!child.empty())
    return run_child(rt, child, reps, pause_ms, opts["result-file"].as<std::string>());
  return run_parent(opts["hvactor-node"].as<std::string>(), reps, pause_ms);
}
