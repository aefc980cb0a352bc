#pragma once

// How hvactor-bench talks to its peer programs (Open MPI, raw Gloo;
// torch.distributed in peer_torch.py): the options it passes and the line
// rank 0 prints back,
//
//   point <bytes> <time_us> <wrong> <sample_us>...
//
// (wrong: elements wrong on all ranks together). Each peer measures as
// hvactor's measure_point() does: bench_method.hpp's measure_calls, after
// the check. Header-only and free of hvactor, Gloo and MPI, so that the MPI
// peer (a plain MPI program) uses it.

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

/// The options every peer program takes.
struct peer_args {
  std::string kind = "allreduce";
  uint64_t bytes = 4;
  int iters = 20, warmup = 5;
  bool check = false;
  /// raw Gloo only: this process' rank, the rank count and the FileStore.
  int rank = 0, size = 1;
  std::string store;
};

/// Parses `--kind K --bytes B --iters I --warmup W [--check] [--rank R
/// --size N --store DIR]`, from argv[first] on; exits 2 naming what it did
/// not understand (the driver builds these lines, a person never should).
inline peer_args parse_peer_args(int argc, char** argv, int first) {
  peer_args a;
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "hvactor-bench peer: %s\n", what.c_str());
    std::exit(2);
  };
  for (int i = first; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--check") {
      a.check = true;
      continue;
    }
    if (i + 1 >= argc)
      bad(k + " needs a value");
    std::string v = argv[++i];
    char* end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    bool number = end != v.c_str() && *end == '\0' && n >= 0;
    if (k == "--kind")
      a.kind = v;
    else if (k == "--store")
      a.store = v;
    else if (!number)
      bad(k + " " + v + ": not a number");
    else if (k == "--bytes")
      a.bytes = static_cast<uint64_t>(n);
    else if (k == "--iters")
      a.iters = static_cast<int>(n);
    else if (k == "--warmup")
      a.warmup = static_cast<int>(n);
    else if (k == "--rank")
      a.rank = static_cast<int>(n);
    else if (k == "--size")
      a.size = static_cast<int>(n);
    else
      bad("unknown option " + k);
  }
  if (a.kind != "allreduce" && a.kind != "allgather" && a.kind != "broadcast")
    bad("unknown collective " + a.kind);
  if (a.iters < 1 || a.size < 1 || a.rank >= a.size)
    bad("bad --iters, --rank or --size");
  return a;
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
  for (double s : samples_us)
    std::printf(" %.3f", s);
  std::printf("\n");
  std::fflush(stdout);
}

} // namespace hvactor::bench_tool
