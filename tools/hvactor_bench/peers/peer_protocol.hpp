#pragma once

// How hvactor-bench talks to its peer programs (Open MPI, raw Gloo, NCCL;
// torch.distributed in peer_torch.py): the options it passes and the line
// rank 0 prints back for every size,
//
//   point <bytes> <time_us> <wrong> <sample_us>...
//
// (wrong: elements wrong on all ranks together; at most max_samples
// samples, evenly spread over the timed calls). A peer job measures every
// size of the sweep, in order, in one warm process per rank, as hvactor's
// workers do: bench_method.hpp's measure_calls after the check, with the
// same warm-up and timed-call counts per size. Header-only and free of
// hvactor, Gloo and MPI, so that the MPI peer (a plain MPI program) uses
// it.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_method.hpp"

namespace hvactor::bench_tool {

using bench::check_value;
using bench::count_wrong;
using bench::fill_check;

/// Samples a point line carries at most.
constexpr size_t max_samples = 1000;

/// One size of a peer job: its bytes, timed calls and warm-up calls.
struct peer_size {
  uint64_t bytes = 4;
  int iters = 20, warmup = 5;
};

/// The options every peer program takes. `bytes`, `iters` and `warmup` are
/// the size being measured (for_each_size sets them).
struct peer_args {
  std::string kind = "allreduce";
  uint64_t bytes = 4;
  int iters = 20, warmup = 5;
  bool check = false;
  /// raw Gloo only: this process' rank, the rank count, the FileStore and
  /// the address its TCP device binds (another node's, in an emulated
  /// cluster).
  int rank = 0, size = 1;
  std::string store, ip = "127.0.0.1";
  std::vector<peer_size> sizes;
};

/// "1,2,3" -> {1, 2, 3}; empty when an item is not a number >= 0.
inline std::vector<long long> parse_number_list(const std::string& v) {
  std::vector<long long> out;
  for (size_t pos = 0; pos <= v.size();) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos)
      comma = v.size();
    auto item = v.substr(pos, comma - pos);
    char* end = nullptr;
    long long n = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 0)
      return {};
    out.push_back(n);
    pos = comma + 1;
  }
  return out;
}

/// Parses `--kind K --sizes B1,B2,.. --iters I1,I2,.. --warmup W1,W2,..
/// [--check] [--rank R --size N --store DIR --ip ADDRESS]` from argv[first] on (a single
/// --iters or --warmup value applies to every size); exits 2 naming what it
/// did not understand (the driver builds these lines, a person never
/// should).
inline peer_args parse_peer_args(int argc, char** argv, int first) {
  peer_args a;
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "hvactor-bench peer: %s\n", what.c_str());
    std::exit(2);
  };
  std::vector<long long> bytes, iters{20}, warmup{5};
  for (int i = first; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--check") {
      a.check = true;
      continue;
    }
    if (i + 1 >= argc)
      bad(k + " needs a value");
    std::string v = argv[++i];
    if (k == "--kind") {
      a.kind = v;
      continue;
    }
    if (k == "--store" || k == "--ip") {
      (k == "--store" ? a.store : a.ip) = v;
      continue;
    }
    auto list = parse_number_list(v);
    if (list.empty())
      bad(k + " " + v + ": not a number or a comma-separated list of numbers");
    if (k == "--sizes")
      bytes = list;
    else if (k == "--iters")
      iters = list;
    else if (k == "--warmup")
      warmup = list;
    else if (k == "--rank" && list.size() == 1)
      a.rank = static_cast<int>(list[0]);
    else if (k == "--size" && list.size() == 1)
      a.size = static_cast<int>(list[0]);
    else
      bad("unknown option " + k);
  }
  if (a.kind != "allreduce" && a.kind != "allgather" && a.kind != "broadcast")
    bad("unknown collective " + a.kind);
  if (bytes.empty())
    bad("--sizes is missing");
  auto pick = [&](const std::vector<long long>& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; };
  if ((iters.size() != 1 && iters.size() != bytes.size())
      || (warmup.size() != 1 && warmup.size() != bytes.size()))
    bad("--iters and --warmup take one value or one per size");
  for (size_t i = 0; i < bytes.size(); ++i) {
    peer_size s{static_cast<uint64_t>(bytes[i]), static_cast<int>(pick(iters, i)),
                static_cast<int>(pick(warmup, i))};
    if (s.iters < 1 || s.iters > 10000000 || s.warmup > 10000000)
      bad("bad --iters or --warmup");
    a.sizes.push_back(s);
  }
  if (a.size < 1 || a.rank >= a.size)
    bad("bad --rank or --size");
  return a;
}

/// Runs `measure()` for every size of the job, in order, with a.bytes,
/// a.iters and a.warmup set to that size's.
template <class Measure>
void for_each_size(peer_args& a, Measure&& measure) {
  for (auto& s : a.sizes) {
    a.bytes = s.bytes;
    a.iters = s.iters;
    a.warmup = s.warmup;
    measure();
  }
}

/// At most `limit` of `samples`, evenly spread (all of them when fewer).
inline std::vector<double> thin_samples(const std::vector<double>& samples,
                                        size_t limit = max_samples) {
  if (samples.size() <= limit)
    return samples;
  std::vector<double> out;
  out.reserve(limit);
  for (size_t i = 0; i < limit; ++i)
    out.push_back(samples[i * samples.size() / limit]);
  return out;
}

/// Elements per call: allgather's `bytes` is the gathered total.
inline size_t peer_count(const peer_args& a, int ranks) {
  size_t count = a.bytes / sizeof(float);
  return a.kind == "allgather" ? count / static_cast<size_t>(ranks) : count;
}

/// Rank 0's report line.
inline void print_point(const peer_args& a, double slowest_loop_us, int64_t wrong,
                        const std::vector<double>& samples_us) {
  std::printf("point %llu %.3f %lld", static_cast<unsigned long long>(a.bytes),
              slowest_loop_us / a.iters, static_cast<long long>(wrong));
  for (double s : thin_samples(samples_us))
    std::printf(" %.3f", s);
  std::printf("\n");
  std::fflush(stdout);
}

} // namespace hvactor::bench_tool
