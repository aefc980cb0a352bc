// hvactor-bench: measures an hvactor cluster (the embedded one, --address
// HEAD:PORT, or a Slurm allocation through hvactor-run's cluster).
//
//   hvactor-bench allreduce|allgather|broadcast [-np N | --num-hosts H --per-host K]
//                 [-b 4] [-e 64M] [-f 4] [-n 20] [-w 5] [--check]
//                 [--backend auto|shm|gloo|hierarchical] [--json FILE] [--csv FILE]
//
// Prints nccl-tests' columns; --json/--csv keep every sample and the
// machine's description.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "collective.hpp"
#include "control_plane.hpp"
#include "report.hpp"

namespace {

using namespace hvactor::bench_tool;
using clock_type = std::chrono::steady_clock;

/// "4", "64K", "1M", "2G" -> bytes.
size_t parse_size(const std::string& text, const char* option) {
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("{} {}: not a size (e.g. 4, 64K, 1M)", option, text));
  }
  std::string unit = text.substr(pos);
  size_t mult = unit.empty() ? 1
              : unit == "K"  ? size_t{1} << 10
              : unit == "M"  ? size_t{1} << 20
              : unit == "G"  ? size_t{1} << 30
                             : 0;
  if (mult == 0 || n > (size_t{1} << 40) / mult)
    throw std::invalid_argument(fmt::format("{} {}: not a size up to 1T (units K, M, G)", option, text));
  return static_cast<size_t>(n) * mult;
}

struct row {
  size_t bytes = 0, count = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
  std::vector<double> samples;
};

struct config {
  std::string kind;
  int np = 2;
  int num_hosts = 0, per_host = 0;
  size_t min_bytes = 4, max_bytes = size_t{64} << 20, factor = 4;
  int iters = 20, warmup = 5;
  bool check = false;
  std::string backend = "auto";
  std::string json, csv, plot;
};

config parse(const std::vector<std::string>& args) {
  config c;
  c.kind = args.size() > 1 ? args[1] : "";
  cxxopts::Options p{"hvactor-bench " + c.kind,
                     "nccl-tests' sweep of one collective through hvd:: (float32, sum), in "
                     "worker processes of this cluster"};
  // clang-format off
  p.add_options()
    ("n,np", "ranks (packed onto as few nodes as fit)", cxxopts::value<int>()->default_value("2"))
    ("num-hosts", "distinct nodes (with --per-host)", cxxopts::value<int>())
    ("per-host", "ranks per node (with --num-hosts)", cxxopts::value<int>())
    ("b,minbytes", "smallest message (K, M, G)", cxxopts::value<std::string>()->default_value("4"))
    ("e,maxbytes", "largest message", cxxopts::value<std::string>()->default_value("64M"))
    ("f,stepfactor", "size multiplier between steps", cxxopts::value<int>()->default_value("4"))
    ("iters", "timed calls per size", cxxopts::value<int>()->default_value("20"))
    ("w,warmup", "untimed calls per size", cxxopts::value<int>()->default_value("5"))
    ("c,check", "check every result (the #wrong column)")
    ("backend", "auto | shm | gloo | hierarchical", cxxopts::value<std::string>()->default_value("auto"))
    ("json", "write every sample and the machine's description here", cxxopts::value<std::string>())
    ("csv", "write one row per size here", cxxopts::value<std::string>())
    ("plot", "draw busbw and time against size into FILE.svg or FILE.png (gnuplot)",
     cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
  std::vector<std::string> words(args.begin() + (args.size() > 1 ? 2 : 1), args.end());
  std::vector<char*> argv{const_cast<char*>("hvactor-bench")};
  for (auto& w : words) {
    if (w == "-np")
      w = "--np";
    argv.push_back(w.data());
  }
  auto o = p.parse(static_cast<int>(argv.size()), argv.data());
  if (o.count("help") || c.kind.empty() || c.kind == "--help" || c.kind == "-h") {
    std::cout << p.help() << "\nsubcommands: allreduce, allgather, broadcast, control-plane\n";
    std::exit(c.kind.empty() ? 2 : 0);
  }
  if (c.kind != "allreduce" && c.kind != "allgather" && c.kind != "broadcast")
    throw std::invalid_argument("unknown subcommand '" + c.kind
                                + "' (allreduce, allgather, broadcast, control-plane)");
  if (!o.unmatched().empty())
    throw std::invalid_argument("unexpected argument '" + o.unmatched().front() + "'");
  c.np = o["np"].as<int>();
  if (o.count("num-hosts") != o.count("per-host"))
    throw std::invalid_argument("--num-hosts and --per-host go together");
  if (o.count("num-hosts")) {
    c.num_hosts = o["num-hosts"].as<int>();
    c.per_host = o["per-host"].as<int>();
    if (c.num_hosts < 1 || c.per_host < 1 || c.num_hosts > 4096 || c.per_host > 4096)
      throw std::invalid_argument("--num-hosts and --per-host must be in 1..4096");
    c.np = c.num_hosts * c.per_host;
  }
  if (c.np < 1 || c.np > 65536)
    throw std::invalid_argument(fmt::format("-np must be in 1..65536 (got {})", c.np));
  c.min_bytes = std::max<size_t>(4, parse_size(o["minbytes"].as<std::string>(), "-b"));
  c.max_bytes = parse_size(o["maxbytes"].as<std::string>(), "-e");
  if (c.max_bytes < c.min_bytes)
    throw std::invalid_argument("-e must not be below -b");
  int f = o["stepfactor"].as<int>();
  if (f < 2 || f > 1024)
    throw std::invalid_argument(fmt::format("-f must be in 2..1024 (got {})", f));
  c.factor = static_cast<size_t>(f);
  c.iters = o["iters"].as<int>();
  c.warmup = o["warmup"].as<int>();
  if (c.iters < 1 || c.iters > 1000000 || c.warmup < 0 || c.warmup > 1000000)
    throw std::invalid_argument("--iters must be in 1..1000000 and -w in 0..1000000");
  c.check = o.count("check") > 0;
  c.backend = o["backend"].as<std::string>();
  if (c.backend != "auto" && c.backend != "shm" && c.backend != "gloo" && c.backend != "hierarchical")
    throw std::invalid_argument("--backend must be auto, shm, gloo or hierarchical (got '" + c.backend + "')");
  if (o.count("json"))
    c.json = o["json"].as<std::string>();
  if (o.count("csv"))
    c.csv = o["csv"].as<std::string>();
  if (o.count("plot")) {
    c.plot = o["plot"].as<std::string>();
    auto ext = c.plot.size() > 4 ? c.plot.substr(c.plot.size() - 4) : "";
    if (ext != ".svg" && ext != ".png")
      throw std::invalid_argument("--plot " + c.plot + ": the file must end in .svg or .png");
    if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
      throw std::invalid_argument("--plot needs gnuplot, which is not installed (Debian: apt-get "
                                  "install gnuplot-nox; scripts/setup.sh installs it)");
  }
  return c;
}

std::map<std::string, std::string> backend_env(const std::string& backend) {
  if (backend == "gloo")
    return {{"HVACTOR_SHM", "0"}};
  if (backend == "hierarchical")
    return {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"HOROVOD_HIERARCHICAL_ALLGATHER", "1"}};
  return {};
}

void write_json(const config& c, const std::vector<row>& rows, const std::vector<std::string>& nodes,
                const std::string& path_info) {
  std::ofstream out{c.json};
  if (!out)
    throw std::runtime_error("cannot write " + c.json);
  out << "{\n  \"tool\": \"hvactor-bench\",\n  \"subcommand\": " << json_string(c.kind)
      << ",\n  \"machine\": " << machine_json(nodes, path_info)
      << ",\n  \"settings\": {\"ranks\": " << c.np
      << ", \"type\": \"float\", \"redop\": \"sum\", \"iters\": " << c.iters
      << ", \"warmup\": " << c.warmup << ", \"check\": " << (c.check ? "true" : "false")
      << ", \"backend\": " << json_string(c.backend) << "},\n  \"results\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    out << fmt::format("    {{\"size\": {}, \"count\": {}, \"type\": \"float\", \"redop\": \"sum\", "
                       "\"time_us\": {:.3f}, \"algbw\": {:.4f}, \"busbw\": {:.4f}, \"wrong\": {}, "
                       "\"samples_us\": [",
                       r.bytes, r.count, r.time_us, r.algbw, r.busbw, r.wrong);
    for (size_t j = 0; j < r.samples.size(); ++j)
      out << (j ? ", " : "") << fmt::format("{:.3f}", r.samples[j]);
    out << "]}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

// busbw and time per call against the message size, log scales, through
// gnuplot (data and script in a temp dir next to the plot).
void plot(const config& c, const std::vector<row>& rows) {
  auto data = c.plot + ".dat", script = c.plot + ".gp";
  {
    std::ofstream out{data};
    for (auto& r : rows)
      out << fmt::format("{} {:.6f} {:.6f}\n", r.bytes, r.busbw, r.time_us);
  }
  bool svg = c.plot.substr(c.plot.size() - 4) == ".svg";
  {
    std::ofstream gp{script};
    gp << (svg ? "set terminal svg size 1000,420 dynamic\n" : "set terminal pngcairo size 1000,420\n")
       << "set output '" << c.plot << "'\n"
       << "set multiplot layout 1,2 title 'hvactor-bench " << c.kind << ", " << c.np
       << " ranks (float32 sum)'\n"
       << "set logscale x 2\nset format x '2^{%L}'\nset grid\n"
       << "set xlabel 'message size (bytes)'\nset key top left\n"
       << "set ylabel 'busbw (GB/s)'\nplot '" << data
       << "' using 1:2 with linespoints title 'hvactor'\n"
       << "set logscale y 10\nset ylabel 'time per call (us)'\nplot '" << data
       << "' using 1:3 with linespoints title 'hvactor'\n"
       << "unset multiplot\n";
  }
  auto cmd = fmt::format("gnuplot '{}' 2>&1", script);
  int rc = std::system(cmd.c_str());
  std::remove(data.c_str());
  std::remove(script.c_str());
  if (rc != 0)
    throw std::runtime_error("gnuplot failed to draw " + c.plot);
  fmt::print("# plot: {}\n", c.plot);
}

int run(hvactor::runtime& rt, const config& c) {
  hvactor::executor_options opts;
  if (c.num_hosts > 0) {
    opts.num_hosts = c.num_hosts;
    opts.num_workers_per_host = c.per_host;
  } else {
    opts.num_workers = c.np;
  }
  opts.extra_env_vars = backend_env(c.backend);
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = std::chrono::seconds(60)}),
                       opts};
  ex.start();
  std::vector<row> rows;
  std::string path_info;
  bool tty = ::isatty(STDERR_FILENO);
  auto t0 = clock_type::now();
  std::vector<size_t> sizes;
  for (size_t b = c.min_bytes; b <= c.max_bytes; b *= c.factor) {
    sizes.push_back(b / 4 * 4);
    if (b > c.max_bytes / c.factor)
      break;
  }
  fmt::print("# hvactor-bench {}: {} ranks, float32 sum, {} timed + {} warm-up calls per size{}\n",
             c.kind, c.np, c.iters, c.warmup, c.check ? ", checked" : "");
  fmt::print("# {:>12} {:>12} {:>6} {:>6} {:>12} {:>8} {:>8} {:>7}\n", "size", "count", "type",
             "redop", "time_us", "algbw", "busbw", "#wrong");
  int64_t wrong_total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (tty)
      fmt::print(stderr, "\r[{}] {} B ({}/{}), {:.1f} s   ", c.kind, sizes[k], k + 1, sizes.size(),
                 std::chrono::duration<double>(clock_type::now() - t0).count());
    auto points = ex.run(&measure_point, c.kind, uint64_t{sizes[k]}, int32_t{c.iters},
                         int32_t{c.warmup}, c.check);
    row r;
    r.bytes = sizes[k];
    r.count = sizes[k] / 4;
    for (auto& p : points) {
      r.time_us = std::max(r.time_us, p.loop_us / std::max(1, p.iters));
      r.wrong += p.wrong;
    }
    r.samples = points.at(0).samples_us;
    path_info = points.at(0).path;
    r.algbw = r.time_us > 0 ? static_cast<double>(r.bytes) / (r.time_us * 1e3) : 0;
    r.busbw = r.algbw * bus_factor(c.kind, c.np);
    wrong_total += r.wrong;
    if (tty)
      fmt::print(stderr, "\r{:60}\r", "");
    fmt::print("  {:>12} {:>12} {:>6} {:>6} {:>12.2f} {:>8.3f} {:>8.3f} {:>7}\n", r.bytes, r.count,
               "float", "sum", r.time_us, r.algbw, r.busbw, c.check ? std::to_string(r.wrong) : "N/A");
    std::fflush(stdout);
    rows.push_back(std::move(r));
  }
  fmt::print("# path: {}\n", path_info);
  auto nodes = ex.worker_nodes();
  ex.shutdown();
  if (c.backend == "shm" && path_info.find(c.kind + ": shm") == std::string::npos)
    fmt::print(stderr, "hvactor-bench: --backend shm asked, but {} took another path ({})\n",
               c.kind, path_info);
  if (!c.json.empty())
    write_json(c, rows, nodes, path_info);
  if (!c.csv.empty()) {
    std::ofstream out{c.csv};
    out << "size,count,type,redop,time_us,algbw,busbw,wrong\n";
    for (auto& r : rows)
      out << fmt::format("{},{},float,sum,{:.3f},{:.4f},{:.4f},{}\n", r.bytes, r.count, r.time_us,
                         r.algbw, r.busbw, r.wrong);
  }
  if (!c.plot.empty())
    plot(c, rows);
  if (wrong_total > 0) {
    fmt::print(stderr, "hvactor-bench: {} wrong element(s)\n", wrong_total);
    return 1;
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    // In a worker process this never returns. The embedded node offers 64
    // CPU slots, so that any -np runs on a small machine.
    hvactor::runtime rt{argc, argv, {.num_cpus = 64}};
    auto args = rt.args();
    if (args.size() > 1 && args[1] == "control-plane")
      return run_control_plane(rt, args);
    return run(rt, parse(args));
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "hvactor-bench: {} (see hvactor-bench SUBCOMMAND --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 1;
  }
}
