// simple_fn: every worker returns hvd::rank(); the driver checks that
// the ranks are unique. Runs on the embedded local cluster, or on a cluster
// of hvactor-node processes:
//   ./simple_fn [--num-workers N] [--num-cpus C]
//   ./simple_fn --address HEAD:PORT [--num-workers N]
// (--num-cpus and --address are the runtime's options)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

namespace {

// Runs in every worker: joins the job's collectives and answers its rank.
int horovod_rank() {
  hvd::init();
  return hvd::rank();
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv};
  // Four workers, or as many as the embedded node has CPUs for (a cluster
  // joined with --address: four).
  int cpus = rt.options().num_cpus;
  int workers = cpus > 0 ? std::min(4, cpus) : 4;
  for (size_t i = 1; i + 1 < rt.args().size(); ++i)
    if (rt.args()[i] == "--num-workers")
      workers = std::stoi(rt.args()[i + 1]);
  try {
    hvactor::executor ex{rt, hvactor::executor::create_settings({}),
                         {.num_workers = workers}};
    ex.start();
    std::vector<int> ranks = ex.run(&horovod_rank);
    std::set<int> unique(ranks.begin(), ranks.end());
    std::printf("ranks from %d workers:", workers);
    for (int r : ranks)
      std::printf(" %d", r);
    std::printf("\n%s\n", unique.size() == ranks.size() ? "all ranks unique" : "DUPLICATE RANKS");
    ex.shutdown();
    return unique.size() == ranks.size() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "simple_fn failed: %s\n", e.what());
    return 1;
  }
}
