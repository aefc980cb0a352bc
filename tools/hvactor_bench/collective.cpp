#include "collective.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include <hvactor/hvactor.hpp>

namespace hvactor::bench_tool {

namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;

double bus_factor(const std::string& kind, int ranks) {
  double n = ranks;
  if (kind == "allreduce")
    return n > 1 ? 2 * (n - 1) / n : 1;
  if (kind == "allgather")
    return n > 1 ? (n - 1) / n : 1;
  return 1; // broadcast
}

namespace {

// Small integers: every result is exact in float32.
float value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

struct collective {
  std::string kind;
  int rank, size;
  size_t count; // elements per call (allgather: this rank's part)
  std::vector<float> in, out;

  void run() {
    if (kind == "allreduce")
      hvd::allreduce(std::span<float>(in), hvd::op::sum);
    else if (kind == "broadcast")
      hvd::broadcast(std::span<float>(in), 0);
    else
      out = hvd::allgather(std::span<const float>(in));
  }

  int64_t check() {
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = value(rank, i);
    run();
    int64_t wrong = 0;
    if (kind == "allreduce") {
      for (size_t i = 0; i < in.size(); ++i)
        wrong += in[i] != static_cast<float>(size * (size + 1) / 2 * static_cast<int>(i % 7 + 1));
    } else if (kind == "broadcast") {
      for (size_t i = 0; i < in.size(); ++i)
        wrong += in[i] != value(0, i);
    } else {
      wrong += static_cast<int64_t>(out.size() != count * static_cast<size_t>(size));
      for (size_t i = 0; i < out.size(); ++i)
        wrong += out[i] != value(static_cast<int>(i / count), i % count);
    }
    return wrong;
  }
};

} // namespace

rank_point measure_point(std::string kind, uint64_t bytes, int32_t iters, int32_t warmup,
                         bool check) {
  if (kind != "allreduce" && kind != "allgather" && kind != "broadcast")
    throw std::invalid_argument("hvactor-bench: unknown collective '" + kind + "'");
  hvd::init();
  collective c{kind, hvd::rank(), hvd::size(), 0, {}, {}};
  c.count = bytes / sizeof(float);
  if (kind == "allgather")
    c.count /= static_cast<size_t>(c.size);
  c.in.assign(c.count, 1.0f);
  rank_point p;
  p.path = hvd::backend_info();
  if (check)
    p.wrong = c.check();
  for (int i = 0; i < warmup; ++i)
    c.run();
  // A rank that slept in the barrier wakes later than the others; one more
  // call after it puts every rank back in step before the clock starts.
  hvd::barrier();
  c.run();
  p.samples_us.reserve(static_cast<size_t>(iters));
  auto start = clock_type::now();
  for (int i = 0; i < iters; ++i) {
    auto t0 = clock_type::now();
    c.run();
    p.samples_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  p.loop_us = std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
  p.iters = iters;
  return p;
}

} // namespace hvactor::bench_tool
