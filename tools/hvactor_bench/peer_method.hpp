#pragma once

// How every peer of hvactor-bench (Open MPI, raw Gloo, torch.distributed in
// peer_torch.py) measures one size, so that they are timed exactly like
// hvactor's measure_point(): with --check one call on data whose result is
// known, `warmup` calls, a barrier, one more call, then `iters` timed calls.
// The reported time is the slowest rank's loop time / iters; rank 0 prints
//
//   point <bytes> <time_us> <wrong> <sample_us>...
//
// (wrong: elements wrong on all ranks together). Header-only and free of
// hvactor, Gloo and MPI, so that the MPI peer (a plain MPI program) uses it.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace hvactor::bench_tool {

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

/// What rank `rank` contributes at element `i` of the checked call (small
/// integers: every sum is exact in float32).
inline float check_value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

/// Elements per call: allgather's `bytes` is the gathered total.
inline size_t peer_count(const peer_args& a, int ranks) {
  size_t count = a.bytes / sizeof(float);
  return a.kind == "allgather" ? count / static_cast<size_t>(ranks) : count;
}

/// Fills the input of the checked call.
inline void fill_check(std::vector<float>& in, int rank) {
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = check_value(rank, i);
}

/// Wrong elements after the checked call: `in` in place (allreduce,
/// broadcast) or `out` (allgather, `count` per rank).
inline int64_t count_wrong(const std::string& kind, const std::vector<float>& in,
                           const std::vector<float>& out, size_t count, int ranks) {
  int64_t wrong = 0;
  if (kind == "allreduce") {
    for (size_t i = 0; i < in.size(); ++i)
      wrong += in[i] != static_cast<float>(ranks * (ranks + 1) / 2 * static_cast<int>(i % 7 + 1));
  } else if (kind == "broadcast") {
    for (size_t i = 0; i < in.size(); ++i)
      wrong += in[i] != check_value(0, i);
  } else {
    wrong += static_cast<int64_t>(out.size() != count * static_cast<size_t>(ranks));
    for (size_t i = 0; i < out.size() && count > 0; ++i)
      wrong += out[i] != check_value(static_cast<int>(i / count), i % count);
  }
  return wrong;
}

/// Runs the protocol above; `run` makes one call, `barrier` waits for every
/// rank; returns rank-local loop time (us) and fills `samples_us`.
template <class Run, class Barrier>
double timed_loop(const peer_args& a, Run run, Barrier barrier, std::vector<double>& samples_us) {
  using clock_type = std::chrono::steady_clock;
  for (int i = 0; i < a.warmup; ++i)
    run();
  barrier();
  run();
  samples_us.reserve(static_cast<size_t>(a.iters));
  auto start = clock_type::now();
  for (int i = 0; i < a.iters; ++i) {
    auto t0 = clock_type::now();
    run();
    samples_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
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
