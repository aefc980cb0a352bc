// A worker's memory and threads after hvd::init and one allreduce, read
// from /proc/self/status (VmRSS, Threads) in each rank's own process:
//  - executor mode (default): a 2-worker job on the embedded cluster; each
//    worker serves the driver's calls and joins the collectives;
//  - SPMD mode (`spmd`): the program as hvactor-run starts it, no driver:
//      hvactor-run -np 2 worker_footprint spmd
// benchmarks/worker_footprint.sh runs both and prints one table.
//   worker_footprint [--num-workers 2]

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

namespace {

/// "rss_kib threads" of this process.
std::string footprint() {
  std::ifstream in{"/proc/self/status"};
  std::string line, rss = "?", threads = "?";
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0)
      rss = std::to_string(std::stol(line.substr(6)));
    else if (line.rfind("Threads:", 0) == 0)
      threads = std::to_string(std::stol(line.substr(8)));
  }
  return rss + " " + threads;
}

std::string init_and_measure() {
  hvd::init();
  std::vector<float> grad(1 << 16, 1.0f);
  hvd::allreduce(std::span<float>(grad), hvd::op::sum);
  auto line = "rank " + std::to_string(hvd::rank()) + " " + footprint();
  return line;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string{argv[1]} == "spmd") {
    auto line = init_and_measure();
    std::printf("spmd %s\n", line.c_str());
    std::fflush(stdout);
    hvd::shutdown();
    return 0;
  }
  hvactor::runtime rt{argc, argv};
  int workers = 2;
  for (size_t i = 1; i + 1 < rt.args().size(); ++i)
    if (rt.args()[i] == "--num-workers")
      workers = std::stoi(rt.args()[i + 1]);
  try {
    hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = workers}};
    ex.start();
    for (auto& line : ex.run(&init_and_measure))
      std::printf("executor %s\n", line.c_str());
    ex.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker_footprint failed: %s\n", e.what());
    return 1;
  }
}
