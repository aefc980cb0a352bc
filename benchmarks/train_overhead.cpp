// hvactor::train's own costs on the embedded cluster, each next to a peer
// measured in the same run:
//  - fit() of a loop that reports once vs the executor alone (start, run of
//    an empty function, shutdown): what the trainer adds to a job;
//  - report() without a checkpoint (every rank, lockstep with the driver)
//    vs an hvd::barrier on the same workers (the cheapest collective sync);
//  - report() with a checkpoint of S MiB: rank 0's report time, as MB/s,
//    vs std::filesystem::copy of the same directory on this machine (what
//    persisting a checkpoint locally costs at least);
//  - get_dataset_shard() of an N-row float64 dataset vs reading the same
//    bytes back from a file.
//   train_overhead [--workers 2] [--reports 200] [--ckpt-mib 64] [--rows 4000000] [--repeats 5]

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs.empty() ? 0 : xs[xs.size() / 2];
}

int64_t cfg(const char* key) {
  return train::get_context().config().at(key).as_int();
}

/// A fresh private folder (mkdtemp: 0700, made here), so that removing it
/// removes only what this benchmark wrote.
fs::path scratch_dir(const std::string& what) {
  auto pattern = (fs::temp_directory_path() / fmt::format("hvactor-train-bench-{}-XXXXXX", what)).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot create a folder in the temp dir: " + pattern);
  return pattern;
}

// In one write, as the original: the file then reads back fastest (large
// page-cache folios; written in 4 MiB pieces, the shard file below read
// back at 0.3 GB/s instead of 8 GB/s). Its buffer is freed before any
// peak RSS is measured.
void write_file(const fs::path& p, size_t bytes) {
  std::vector<char> data(bytes);
  for (size_t i = 0; i < bytes; ++i)
    data[i] = static_cast<char>(i * 2654435761u >> 13);
  std::ofstream{p, std::ios::binary}.write(data.data(), static_cast<std::streamsize>(bytes));
}

// This process's resident set now ("VmRSS") or its peak ("VmHWM"), in MiB.
double status_mib(const char* field) {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0)
      return std::stod(line.substr(line.find(':') + 1)) / 1024.0;
  return 0;
}

// Restarts the peak (VmHWM) from the current resident set.
void reset_peak_rss() {
  std::ofstream{"/proc/self/clear_refs"} << "5";
}

void once_loop(train::context&) {
  train::report({{"x", 1}});
}

void empty_fn() {
}

/// reports without a checkpoint, then barriers, on every rank; rank 0
/// reports the medians.
void sync_loop(train::context& ctx) {
  hvd::init();
  auto n = cfg("reports");
  std::vector<double> rep, bar;
  auto start = clock_type::now();
  for (int64_t i = 0; i < n; ++i) {
    auto t0 = clock_type::now();
    train::report({{"i", i}});
    rep.push_back(seconds_since(t0));
    t0 = clock_type::now();
    hvd::barrier();
    bar.push_back(seconds_since(t0));
  }
  // A report with a checkpoint returns once every earlier report is
  // recorded by the driver: the reports' throughput.
  auto dir = scratch_dir("sync-ckpt");
  write_file(dir / "x", 1);
  train::report({{"drain", 1}}, train::checkpoint::from_directory(dir.string()));
  auto recorded = seconds_since(start) / static_cast<double>(n + 1);
  fs::remove_all(dir);
  // One last report carries the medians.
  train::report({{"report_us", median(rep) * 1e6},
                 {"barrier_us", median(bar) * 1e6},
                 {"recorded_us", recorded * 1e6}});
  hvd::shutdown();
  (void)ctx;
}

/// Rank 0 reports a checkpoint of ckpt_mib MiB, repeats times; also times
/// a local copy of it.
void ckpt_loop(train::context& ctx) {
  auto mib = cfg("ckpt_mib");
  auto dir = scratch_dir("ckpt");
  write_file(dir / "model.bin", static_cast<size_t>(mib) << 20);
  std::vector<double> rep, copy;
  reset_peak_rss();
  auto idle = status_mib("VmRSS");
  for (int64_t i = 0; i < cfg("repeats"); ++i) {
    auto t0 = clock_type::now();
    train::report({{"i", i}}, train::checkpoint::from_directory(dir.string()));
    rep.push_back(seconds_since(t0));
    if (ctx.world_rank() == 0) {
      // The driver removes the checkpoint past num_to_keep after answering:
      // let it finish, so that the copy has the disk to itself.
      std::this_thread::sleep_for(std::chrono::seconds{1});
      auto copy_dir = scratch_dir("copy");
      t0 = clock_type::now();
      fs::copy(dir, copy_dir / "copy", fs::copy_options::recursive);
      ::sync();
      copy.push_back(seconds_since(t0));
      fs::remove_all(copy_dir);
    }
  }
  fs::remove_all(dir);
  auto [rmin, rmax] = std::minmax_element(rep.begin(), rep.end());
  auto [cmin, cmax] = std::minmax_element(copy.begin(), copy.end());
  bool timed = !rep.empty() && !copy.empty();
  train::report({{"report_s", median(rep)},
                 {"report_min_s", timed ? *rmin : 0.0},
                 {"report_max_s", timed ? *rmax : 0.0},
                 {"copy_s", median(copy)},
                 {"copy_min_s", timed ? *cmin : 0.0},
                 {"copy_max_s", timed ? *cmax : 0.0},
                 {"peak_extra_mib", status_mib("VmHWM") - idle}});
}

/// Times fetching the shard, and reading the same bytes from a file.
void shard_loop(train::context&) {
  hvd::init();
  hvd::barrier(); // every rank fetches at once, as a fit's ranks do
  auto t0 = clock_type::now();
  auto& shard = train::get_dataset_shard("train");
  // Both sides read every byte once: a mapped shard's pages count too.
  auto xs = shard["x"].values<double>();
  volatile double sink = std::accumulate(xs.begin(), xs.end(), 0.0);
  auto fetch = seconds_since(t0);
  auto bytes = shard["x"].size_bytes();
  // The slowest rank's fetch: every rank's bytes arrived within it.
  std::vector<double> slowest{fetch};
  hvd::allreduce(std::span<double>{slowest}, hvd::op::max);
  auto shard_dir = scratch_dir("shard");
  auto file = shard_dir / "shard.bin";
  write_file(file, bytes);
  ::sync();
  // Drop nothing from the page cache, and read into memory already touched:
  // the peer is the fastest local read.
  std::vector<char> back(bytes, 1);
  t0 = clock_type::now();
  std::ifstream{file, std::ios::binary}.read(back.data(), static_cast<std::streamsize>(bytes));
  auto* ys = reinterpret_cast<const double*>(back.data());
  sink = std::accumulate(ys, ys + bytes / sizeof(double), 0.0);
  auto read = seconds_since(t0);
  fs::remove_all(shard_dir);
  train::report({{"fetch_s", fetch},
                 {"slowest_s", slowest[0]},
                 {"read_s", read},
                 {"bytes", static_cast<int64_t>(bytes)}});
  hvd::shutdown();
}

} // namespace

/// The shard fetch rows: `repeats` fits, a fresh worker each; medians and
/// the range.
template <class Run>
void shard_rows(int64_t rows, int workers, int repeats, Run& run) {
  std::vector<double> xs(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    xs[static_cast<size_t>(i)] = static_cast<double>(i);
  auto ds = train::dataset::from_tensors({{"x", train::column{std::move(xs)}}});
  std::vector<double> fetches, reads, slowest;
  double mb = 0;
  for (int i = 0; i < repeats; ++i) {
    auto sh = run(&shard_loop, {}, {{"train", ds}});
    fetches.push_back(sh.metrics.at("fetch_s").as_double());
    slowest.push_back(sh.metrics.at("slowest_s").as_double());
    reads.push_back(sh.metrics.at("read_s").as_double());
    mb = static_cast<double>(sh.metrics.at("bytes").as_int()) / 1e6;
  }
  auto fetch = median(fetches), read = median(reads);
  auto [fmin, fmax] = std::minmax_element(fetches.begin(), fetches.end());
  auto [rmin, rmax] = std::minmax_element(reads.begin(), reads.end());
  fmt::print("| get_dataset_shard() of {:.0f} MB (rank 0's share of {} rows) vs reading a file | {:.0f} MB/s ({:.1f} ms, {:.1f}-{:.1f}) | {:.0f} MB/s ({:.1f} ms, {:.1f}-{:.1f}) | {:.2f}x |\n",
             mb, rows, mb / fetch, fetch * 1e3, *fmin * 1e3, *fmax * 1e3, mb / read, read * 1e3,
             *rmin * 1e3, *rmax * 1e3, read / fetch);
  // Across machines every shard crosses the driver's link: what it carried.
  fmt::print("| all {} shards ({:.0f} MB) at once, through the driver (the link's rate is the peer "
             "across machines) | {:.0f} MB/s ({:.1f} ms) | | |\n",
             workers, mb * workers, mb * workers / median(slowest), median(slowest) * 1e3);
}

// The benchmark's own flags (what the runtime left of argv); exits on
// --help or a bad flag.
cxxopts::ParseResult parse_flags(const std::vector<std::string>& args) {
  cxxopts::Options cli{"train_overhead", "hvactor::train's costs next to their peers"};
  cli.add_options()("workers", "workers", cxxopts::value<int>()->default_value("2"))(
    "reports", "reports for the latency", cxxopts::value<int>()->default_value("200"))(
    "ckpt-mib", "checkpoint size", cxxopts::value<int>()->default_value("64"))(
    "rows", "dataset rows (float64)", cxxopts::value<int64_t>()->default_value("4000000"))(
    "repeats", "repeats of the fit and checkpoint timings", cxxopts::value<int>()->default_value("5"))(
    "h,help", "this text (and the runtime's flags: --address, --tls-cert, ...)");
  std::vector<char*> rest;
  for (auto& a : args)
    rest.push_back(const_cast<char*>(a.c_str()));
  try {
    auto o = cli.parse(static_cast<int>(rest.size()), rest.data());
    if (o.count("help")) {
      fmt::print("{}", cli.help());
      std::exit(0);
    }
    return o;
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "train_overhead: {}\n{}", e.what(), cli.help());
    std::exit(2);
  }
}

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 8}};
  auto o = parse_flags(rt.args());
  int workers = o["workers"].as<int>();
  int repeats = o["repeats"].as<int>();
  auto storage = scratch_dir("storage");
  auto run = [&](train::trainer::loop_fn loop, train::config c,
                 std::map<std::string, train::dataset> ds = {}) {
    train::trainer t{rt, loop,
                     {.scaling = {.num_workers = workers},
                      .datasets = std::move(ds),
                      .run = {.name = "bench", .storage_path = storage.string(),
                              .checkpoint = {.num_to_keep = 1}, .verbose = 0},
                      .config = std::move(c)}};
    auto r = t.fit();
    if (r.error)
      std::rethrow_exception(r.error);
    return r;
  };

  auto& address = rt.options().address;
  fmt::print("hvactor::train overhead, {} workers, {}, {} repeats (medians)\n\n", workers,
             address.empty() ? std::string{"embedded cluster"} : "cluster at " + address, repeats);
  // fit() vs the executor alone.
  std::vector<double> fit_s, exec_s;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = clock_type::now();
    run(&once_loop, {});
    fit_s.push_back(seconds_since(t0));
    t0 = clock_type::now();
    hvactor::executor ex{rt, {}, {.num_workers = workers}};
    ex.start();
    ex.run(&empty_fn);
    ex.shutdown();
    exec_s.push_back(seconds_since(t0));
  }
  fmt::print("| what | hvactor::train | peer | ratio |\n|---|---|---|---|\n");
  fmt::print("| fit() with one report vs executor start+run+shutdown | {:.0f} ms | {:.0f} ms | {:.2f}x |\n",
             median(fit_s) * 1e3, median(exec_s) * 1e3, median(fit_s) / median(exec_s));

  auto sync = run(&sync_loop, {{"reports", o["reports"].as<int>()}});
  auto rep_us = sync.metrics.at("report_us").as_double();
  auto bar_us = sync.metrics.at("barrier_us").as_double();
  fmt::print("| report() without checkpoint vs hvd::barrier() | {:.0f} us | {:.0f} us | {:.2f}x |\n",
             rep_us, bar_us, rep_us / bar_us);
  fmt::print("| {} reports and barriers until the driver recorded them all, per report (the "
             "driver's pace) | {:.0f} us | | |\n",
             o["reports"].as<int>(), sync.metrics.at("recorded_us").as_double());

  auto mib = o["ckpt-mib"].as<int>();
  auto driver_idle = (reset_peak_rss(), status_mib("VmRSS"));
  auto ck = run(&ckpt_loop, {{"ckpt_mib", mib}, {"repeats", repeats}});
  auto rep_s = ck.metrics.at("report_s").as_double();
  auto copy_s = ck.metrics.at("copy_s").as_double();
  auto ms = [&](const char* key) { return ck.metrics.at(key).as_double() * 1e3; };
  fmt::print("| report() with a {} MiB checkpoint vs filesystem copy + sync | {:.0f} MB/s ({:.0f} ms, {:.0f}-{:.0f}) | {:.0f} MB/s ({:.0f} ms, {:.0f}-{:.0f}) | {:.2f}x |\n",
             mib, mib * 1.048576 / rep_s, rep_s * 1e3, ms("report_min_s"), ms("report_max_s"),
             mib * 1.048576 / copy_s, copy_s * 1e3, ms("copy_min_s"), ms("copy_max_s"),
             copy_s / rep_s);
  fmt::print("| peak RSS above idle while the {} MiB checkpoints are reported: driver, rank 0 | "
             "{:.0f} MiB, {:.0f} MiB | | |\n",
             mib, status_mib("VmHWM") - driver_idle, ck.metrics.at("peak_extra_mib").as_double());

  shard_rows(o["rows"].as<int64_t>(), workers, repeats, run);
  fs::remove_all(storage);
  return 0;
}
