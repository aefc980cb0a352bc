// hvactor-bench scale: its tables and its JSON (scale.hpp).

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "tools/hvactor_bench/report.hpp"
#include "tools/hvactor_bench/scale/scale.hpp"

namespace hvactor::bench_tool {

namespace {

/// "p50/max" of per-rank values, in whole milliseconds.
std::string p50_max(const std::vector<double>& v) {
  if (v.empty())
    return "-";
  return fmt::format("{:.0f}/{:.0f}", quantile(v, 0.5), quantile(v, 1.0));
}

std::string once(double ms) {
  return ms < 0 ? "-" : fmt::format("{:.0f}", ms);
}

/// The median over rounds of what `f` takes from each successful round.
template <class F>
double over_rounds(const std::vector<scale_round>& rounds, F f) {
  std::vector<double> v;
  for (auto& r : rounds)
    if (r.ok)
      v.push_back(f(r));
  return v.empty() ? 0 : quantile(v, 0.5);
}

std::string phase_json(const char* name, const std::vector<double>& v) {
  if (v.empty())
    return fmt::format("\"{}\": null", name);
  return fmt::format("\"{}\": {{\"p50\": {:.3f}, \"max\": {:.3f}, \"ranks\": {}}}", name,
                     quantile(v, 0.5), quantile(v, 1.0), json_numbers(v));
}

std::string round_json(const scale_round& r) {
  return fmt::format(
    "    {{\"round\": {}, \"ranks\": {}, \"ok\": {}, \"error\": {}, \"total_ms\": {:.3f}, "
    "\"start_ms\": {:.3f}, \"placement_ms\": {:.3f}, \"shipping_ms\": {:.3f}, \"shipped_mib\": "
    "{:.3f},\n     {},\n     "
    "{},\n     {},\n     {},\n     {},\n     \"memory_mib\": {{\"head\": {:.1f}, \"driver\": "
    "{:.1f}, \"nodes\": {}, \"workers\": {}}}}}",
    r.round, r.ranks, r.ok, json_string(r.error), r.total_ms, r.start_ms, r.placement_ms,
    r.shipping_ms, r.shipped_mib, phase_json("process_ms", r.process_ms),
    phase_json("registration_ms", r.registration_ms), phase_json("wait_ms", r.wait_ms),
    phase_json("dispatch_ms", r.dispatch_ms), phase_json("rendezvous_ms", r.rendezvous_ms),
    r.head_mib, r.driver_mib, json_numbers(r.node_mib), json_numbers(r.worker_mib));
}

const scale_round* last_ok(const std::vector<scale_round>& rounds) {
  for (auto i = rounds.rbegin(); i != rounds.rend(); ++i)
    if (i->ok)
      return &*i;
  return nullptr;
}

/// The first job ships the driver's binary to the nodes (cold); later
/// ones find it in the nodes' caches. The summary's medians are over the
/// later rounds when there are any.
void print_hvactor_summary(const std::vector<scale_round>& all) {
  int ok = static_cast<int>(std::count_if(all.begin(), all.end(), [](auto& r) { return r.ok; }));
  fmt::print("# hvactor: {} of {} start(s) succeeded\n", ok, all.size());
  if (ok == 0)
    return;
  if (all.front().ok)
    fmt::print("# first job: {:.0f} ms to every hvd::init() done; it shipped {:.1f} MiB to the "
               "nodes in {:.0f} ms; driver {:.1f} MiB\n",
               all.front().total_ms, all.front().shipped_mib, all.front().shipping_ms,
               all.front().driver_mib);
  std::vector<scale_round> rounds(all.begin() + (all.size() > 1 ? 1 : 0), all.end());
  std::vector<double> totals;
  for (auto& r : rounds)
    if (r.ok)
      totals.push_back(r.total_ms);
  if (totals.empty())
    return;
  fmt::print("# {}", all.size() > 1 ? "later jobs" : "the job");
  auto med = [&](auto f) { return over_rounds(rounds, f); };
  fmt::print(": start() to every hvd::init() done: median {:.0f} ms (min {:.0f}, max {:.0f}); "
             "start() {:.0f} ms\n",
             quantile(totals, 0.5), quantile(totals, 0.0), quantile(totals, 1.0),
             med([](auto& r) { return r.start_ms; }));
  auto pm = [&](const char* name, std::vector<double> scale_round::*v) {
    fmt::print("#   {:<13} p50 {:>7.0f} ms, max {:>7.0f} ms (medians over rounds)\n", name,
               med([&](auto& r) { return quantile(r.*v, 0.5); }),
               med([&](auto& r) { return quantile(r.*v, 1.0); }));
  };
  fmt::print("#   {:<13} {:>11.0f} ms\n#   {:<13} {:>11.0f} ms\n", "placement",
             med([](auto& r) { return r.placement_ms; }), "shipping",
             med([](auto& r) { return r.shipping_ms; }));
  pm("process", &scale_round::process_ms);
  pm("registration", &scale_round::registration_ms);
  pm("wait", &scale_round::wait_ms);
  pm("dispatch", &scale_round::dispatch_ms);
  pm("rendezvous", &scale_round::rendezvous_ms);
  auto* m = last_ok(all);
  fmt::print("# memory (RSS, MiB, last good round): head {:.1f}; node p50 {:.1f} max {:.1f}; "
             "driver {:.1f}; worker p50 {:.1f} max {:.1f}\n",
             m->head_mib, m->node_mib.empty() ? 0 : quantile(m->node_mib, 0.5),
             m->node_mib.empty() ? 0 : quantile(m->node_mib, 1.0), m->driver_mib,
             quantile(m->worker_mib, 0.5), quantile(m->worker_mib, 1.0));
}

void print_mpi_summary(const std::vector<mpi_round>& mpi) {
  std::vector<double> totals, exits;
  for (auto& r : mpi)
    if (r.ok) {
      totals.push_back(r.total_ms);
      exits.push_back(r.exit_ms);
    }
  fmt::print("# Open MPI: {} of {} start(s) succeeded", totals.size(), mpi.size());
  if (!totals.empty())
    fmt::print("; mpirun to every MPI_Init done: median {:.0f} ms (min {:.0f}, max {:.0f}); "
               "mpirun's exit median {:.0f} ms",
               quantile(totals, 0.5), quantile(totals, 0.0), quantile(totals, 1.0),
               quantile(exits, 0.5));
  fmt::print("\n");
}

} // namespace

void print_round_header() {
  fmt::print("# {:>5} {:>5} {:>8} {:>8} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11}\n",
             "round", "ranks", "total", "start()", "place", "ship", "process", "register",
             "wait", "dispatch", "rendezvous");
  fmt::print("# {:>5} {:>5} {:>8} {:>8} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "",
             "", "ms", "ms", "ms", "ms", "p50/max", "p50/max", "p50/max", "p50/max", "p50/max");
  std::fflush(stdout);
}

void print_round(const scale_round& r) {
  if (!r.ok) {
    fmt::print("  {:>5} {:>5} FAILED after {:.0f} ms (placement {}, shipping {} ms): {}\n",
               r.round, r.ranks, r.total_ms, once(r.placement_ms), once(r.shipping_ms), r.error);
  } else {
    fmt::print("  {:>5} {:>5} {:>8.0f} {:>8.0f} {:>6} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11}\n",
               r.round, r.ranks, r.total_ms, r.start_ms, once(r.placement_ms),
               once(r.shipping_ms), p50_max(r.process_ms), p50_max(r.registration_ms),
               p50_max(r.wait_ms), p50_max(r.dispatch_ms), p50_max(r.rendezvous_ms));
  }
  std::fflush(stdout);
}

void print_mpi_round(const mpi_round& r) {
  if (r.ok)
    fmt::print("  {:>5} {:>5} {:>8.0f}   Open MPI: mpirun to every MPI_Init (median rank {:.0f} "
               "ms); mpirun exited at {:.0f} ms\n",
               r.round, "mpi", r.total_ms, r.median_ms, r.exit_ms);
  else
    fmt::print("  {:>5} {:>5} FAILED   Open MPI after {:.0f} ms: {}\n", r.round, "mpi",
               r.exit_ms, r.error);
  std::fflush(stdout);
}

void print_summary(const std::vector<scale_round>& rounds, const std::vector<mpi_round>& mpi,
                   const scale_idle* idle) {
  print_hvactor_summary(rounds);
  if (!mpi.empty())
    print_mpi_summary(mpi);
  if (idle != nullptr)
    fmt::print("# idle CPU over {:.1f} s, percent of one core: {:.2f} in all = head {:.2f} + "
               "nodes {:.2f} + driver {:.2f} + workers {:.2f}; busiest {} at {:.2f}\n",
               idle->seconds, idle->total, idle->head, idle->nodes, idle->driver, idle->workers,
               idle->busiest, idle->busiest_percent);
  if (idle != nullptr) {
    fmt::print("#   by thread (role and name, summed over processes):");
    for (size_t i = 0; i < idle->threads.size() && i < 8 && idle->threads[i].second >= 0.01; ++i)
      fmt::print("{} {} {:.2f}", i ? "," : "", idle->threads[i].first, idle->threads[i].second);
    fmt::print("\n");
  }
  std::fflush(stdout);
}

void write_scale_json(const std::string& file, const std::string& settings,
                      const std::vector<scale_round>& rounds, const std::vector<mpi_round>& mpi,
                      const scale_idle* idle) {
  std::ofstream out{file};
  if (!out)
    throw std::runtime_error("cannot write " + file);
  out << json_head("scale", {}, "", settings);
  for (size_t i = 0; i < rounds.size(); ++i)
    out << round_json(rounds[i]) << (i + 1 < rounds.size() ? ",\n" : "\n");
  out << "  ],\n  \"mpi\": [";
  for (size_t i = 0; i < mpi.size(); ++i)
    out << fmt::format("{}\n    {{\"round\": {}, \"ok\": {}, \"error\": {}, \"total_ms\": {:.3f}, "
                       "\"median_ms\": {:.3f}, \"exit_ms\": {:.3f}}}",
                       i ? "," : "", mpi[i].round, mpi[i].ok, json_string(mpi[i].error),
                       mpi[i].total_ms, mpi[i].median_ms, mpi[i].exit_ms);
  out << "\n  ],\n  \"idle_cpu\": ";
  if (idle != nullptr) {
    std::string threads;
    for (size_t i = 0; i < idle->threads.size() && i < 20; ++i)
      threads += fmt::format("{}{}: {:.3f}", i ? ", " : "", json_string(idle->threads[i].first),
                             idle->threads[i].second);
    out << fmt::format("{{\"seconds\": {:.3f}, \"total\": {:.3f}, \"head\": {:.3f}, \"nodes\": "
                       "{:.3f}, \"driver\": {:.3f}, \"workers\": {:.3f}, \"busiest\": {}, "
                       "\"busiest_percent\": {:.3f}, \"threads\": {{{}}}}}",
                       idle->seconds, idle->total, idle->head, idle->nodes, idle->driver,
                       idle->workers, json_string(idle->busiest), idle->busiest_percent, threads);
  } else {
    out << "null";
  }
  out << "\n}\n";
}

} // namespace hvactor::bench_tool
