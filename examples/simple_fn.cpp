// simple_fn: every worker returns its Horovod rank; the driver checks that
// the ranks are unique. Runs on the embedded local cluster:
//   ./simple_fn [--num-workers N] [--num-cpus C]
// (--num-cpus is the runtime's: what the embedded node offers)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <hvactor/hvactor.hpp>

namespace {

int horovod_rank() {
  const char* rank = std::getenv("HOROVOD_RANK");
  return rank ? std::atoi(rank) : -1;
}

} // namespace

int main(int argc, char** argv) {
  // In a worker process this never returns.
  hvactor::runtime rt{argc, argv};
  // Four workers, or as many as the embedded node has CPUs for.
  int workers = std::min(4, rt.options().num_cpus);
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
