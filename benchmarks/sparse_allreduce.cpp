// sparse_allreduce: an Embedding table's sparse gradient reduced by
// hvd::distributed_optimizer the two ways it offers (docs/benchmarks/
// sparse.md), an SPMD program under hvactor-run:
//   hvactor-run -np 2 ./sparse_allreduce [ROWS DIM ROUNDS CALLS]
// For each density (the fraction of the table's rows a rank's batch
// touches, at random, seeded by rank), rank 0 prints the median over
// ROUNDS rounds (and the range) of the mean time per call of CALLS calls
// of the optimizer's synchronize() on that gradient:
//   sparse   the default: Horovod's sparse allreduce (indices and values
//            allgathered, then coalesced)
//   dense    sparse_as_dense: to_dense(), an allreduce of the whole table,
//            back to a sparse gradient of rows
//   wire     of which the allreduce of the dense table alone
// All average. The ranks meet at a barrier before each timed loop.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <torch/torch.h>

#include "hvactor/torch.hpp"

namespace hvd = hvactor::hvd;
using clock_type = std::chrono::steady_clock;

namespace {

// Rank r's gradient: `touched` distinct random rows of a rows x dim table.
torch::Tensor gradient(int64_t rows, int64_t dim, int64_t touched) {
  auto idx = torch::randperm(rows, torch::kLong).narrow(0, 0, touched).reshape({1, touched});
  return torch::sparse_coo_tensor(idx, torch::randn({touched, dim}), {rows, dim});
}

template <class F>
double mean_us(int calls, F&& f) {
  hvd::barrier();
  auto t0 = clock_type::now();
  for (int i = 0; i < calls; ++i)
    f();
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / calls;
}

struct stat {
  double median, low, high;
};

stat summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

} // namespace

int main(int argc, char** argv) {
  int64_t rows = argc > 1 ? std::atoll(argv[1]) : 100000;
  int64_t dim = argc > 2 ? std::atoll(argv[2]) : 64;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  int calls = argc > 4 ? std::atoi(argv[4]) : 20;
  if (rows < 1 || dim < 1 || rounds < 1 || calls < 1) {
    std::fprintf(stderr, "usage: sparse_allreduce [ROWS DIM ROUNDS CALLS], all >= 1\n");
    return 2;
  }
  torch::set_num_threads(1);
  hvd::init();
  torch::manual_seed(1000 + hvd::rank());
  if (hvd::rank() == 0)
    std::printf("# %d ranks, table %lld x %lld float32 (%.1f MiB), %d rounds x %d calls; "
                "us per call: median (range)\n"
                "# density  rows/rank   sparse_us (range)          dense_us (range)"
                "           dense/sparse  wire_us (range)\n",
                hvd::size(), static_cast<long long>(rows), static_cast<long long>(dim),
                static_cast<double>(rows * dim * 4) / (1 << 20), rounds, calls);
  for (double density : {0.001, 0.01, 0.1, 0.5}) {
    auto touched = std::max<int64_t>(1, static_cast<int64_t>(density * static_cast<double>(rows)));
    auto g = gradient(rows, dim, touched);
    std::vector<double> sparse, dense, wire;
    auto table = g.to_dense();
    auto weight = torch::zeros({rows, dim}, torch::requires_grad());
    torch::optim::SGD sgd({weight}, 0.0);
    auto reduce = [&](hvd::distributed_optimizer& opt) {
      return mean_us(calls, [&] {
        weight.mutable_grad() = g;
        opt.synchronize();
      });
    };
    hvd::distributed_optimizer as_sparse(sgd, {.overlap = false});
    hvd::distributed_optimizer as_dense(sgd, {.overlap = false, .sparse_as_dense = true});
    for (int r = 0; r < rounds; ++r) {
      sparse.push_back(reduce(as_sparse));
      dense.push_back(reduce(as_dense));
      wire.push_back(mean_us(calls, [&] { hvd::allreduce(table, hvd::op::average); }));
    }
    auto s = summary(sparse), d = summary(dense), w = summary(wire);
    if (hvd::rank() == 0)
      std::printf("  %6.3f  %9lld  %10.0f (%.0f-%.0f)  %12.0f (%.0f-%.0f)  %8.2f  %10.0f (%.0f-%.0f)\n",
                  density, static_cast<long long>(touched), s.median, s.low, s.high, d.median,
                  d.low, d.high, d.median / s.median, w.median, w.low, w.high);
  }
  hvd::shutdown();
  return 0;
}
