// hvactor-bench control-plane: how fast the cluster starts workers and
// answers calls (what benchmarks/control_plane measures on the embedded
// cluster, here on any cluster).

#include "control_plane.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

namespace hvactor::bench_tool {

namespace {

using clock_type = std::chrono::steady_clock;

int noop_call() {
  return 0;
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string join(const std::vector<double>& v) {
  std::string out;
  for (auto x : v)
    out += (out.empty() ? "" : ", ") + fmt::format("{:.3f}", x);
  return out;
}

} // namespace

int run_control_plane(hvactor::runtime& rt, const std::vector<std::string>& args) {
  cxxopts::Options p{"hvactor-bench control-plane",
                     "start() time, synchronous call rate and call latency of this cluster"};
  // clang-format off
  p.add_options()
    ("workers", "worker counts, comma-separated", cxxopts::value<std::vector<int>>()->default_value("1,4"))
    ("repeats", "start()s per worker count", cxxopts::value<int>()->default_value("3"))
    ("seconds", "seconds of calls per worker count", cxxopts::value<double>()->default_value("2"))
    ("json", "write every sample here", cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
  std::vector<char*> argv{const_cast<char*>("hvactor-bench")};
  std::vector<std::string> words(args.begin() + 2, args.end());
  for (auto& w : words)
    argv.push_back(w.data());
  auto o = p.parse(static_cast<int>(argv.size()), argv.data());
  if (o.count("help")) {
    std::cout << p.help() << "\n";
    return 0;
  }
  if (!o.unmatched().empty())
    throw std::invalid_argument("unexpected argument '" + o.unmatched().front() + "'");
  auto counts = o["workers"].as<std::vector<int>>();
  int repeats = o["repeats"].as<int>();
  double seconds = o["seconds"].as<double>();
  for (int w : counts)
    if (w < 1 || w > 4096)
      throw std::invalid_argument(fmt::format("--workers: {} is not in 1..4096", w));
  if (repeats < 1 || repeats > 1000 || !(seconds > 0 && seconds <= 3600))
    throw std::invalid_argument("--repeats must be in 1..1000 and --seconds in (0, 3600]");
  std::string json;
  fmt::print("# hvactor-bench control-plane: {} start()s per count, {:g} s of calls\n", repeats,
             seconds);
  fmt::print("# {:>7} {:>14} {:>14} {:>12} {:>12} {:>12}\n", "workers", "start ms p50",
             "start ms max", "calls/s", "call us p50", "call us p99");
  for (int w : counts) {
    std::vector<double> starts, calls;
    for (int r = 0; r < repeats; ++r) {
      hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = std::chrono::seconds(60)}),
                           {.num_workers = w}};
      auto t0 = clock_type::now();
      ex.start();
      starts.push_back(ms_since(t0));
      if (r + 1 == repeats) {
        auto end = clock_type::now() + std::chrono::duration<double>(seconds);
        while (clock_type::now() < end) {
          auto c0 = clock_type::now();
          ex.run(&noop_call);
          calls.push_back(ms_since(c0) * 1000.0);
        }
      }
      ex.shutdown();
    }
    double rate = calls.size() / seconds;
    fmt::print("  {:>7} {:>14.1f} {:>14.1f} {:>12.0f} {:>12.1f} {:>12.1f}\n", w,
               quantile(starts, 0.5), quantile(starts, 1.0), rate, quantile(calls, 0.5),
               quantile(calls, 0.99));
    json += fmt::format("{}    {{\"workers\": {}, \"start_ms\": [{}], \"calls_per_s\": {:.1f}, "
                        "\"call_us_p50\": {:.3f}, \"call_us_p99\": {:.3f}}}",
                        json.empty() ? "" : ",\n", w, join(starts), rate, quantile(calls, 0.5),
                        quantile(calls, 0.99));
    std::fflush(stdout);
  }
  if (o.count("json")) {
    std::ofstream out{o["json"].as<std::string>()};
    out << "{\n  \"tool\": \"hvactor-bench\",\n  \"subcommand\": \"control-plane\",\n"
        << fmt::format("  \"settings\": {{\"repeats\": {}, \"seconds\": {:g}}},\n", repeats, seconds)
        << "  \"results\": [\n" << json << "\n  ]\n}\n";
  }
  return 0;
}

} // namespace hvactor::bench_tool
