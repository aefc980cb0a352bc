// The SPMD path of hvactor-bench: `hvactor-bench __peer-spmd ...`, one rank
// of an SPMD program that the sweep starts with `hvactor-run` once per
// round (peer.cpp), as users start theirs. Each rank calls hvd::init() from
// hvactor-run's environment and measures every size with the very calls and
// timing of the executor's workers (collective.cpp's measure_point); rank 0
// prints the point lines of peer_protocol.hpp (slowest rank's loop, wrong
// elements of all ranks).

#include <array>
#include <span>

#include <hvactor/hvactor.hpp>

#include "tools/hvactor_bench/sweep/collective.hpp"
#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/peers/peer_protocol.hpp"

namespace hvactor::bench_tool {

namespace hvd = hvactor::hvd;

int run_spmd_peer(int argc, char** argv) {
  auto a = parse_peer_args(argc, argv, 2);
  hvd::init();
  for_each_size(a, [&] {
    auto p = measure_point(a.kind, a.bytes, a.iters, a.warmup, a.check, false);
    std::array<double, 1> slowest{p.loop_us};
    hvd::allreduce(std::span<double>(slowest), hvd::op::max);
    std::array<double, 1> wrong{static_cast<double>(p.wrong)};
    hvd::allreduce(std::span<double>(wrong), hvd::op::sum);
    if (hvd::rank() == 0)
      print_point(a, slowest[0], static_cast<int64_t>(wrong[0]), p.samples_us);
  });
  hvd::shutdown();
  return 0;
}

} // namespace hvactor::bench_tool
