// allreduce: every worker averages a vector with the others through
// hvd::allreduce, gathers the ranks, and fuses a few gradients; the driver
// prints what rank 0 saw.
//   ./allreduce [--num-workers N]

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

namespace {

std::string train_step(int length) {
  hvd::init();
  // Average: every rank contributes rank + 1.
  std::vector<float> grad(static_cast<size_t>(length), static_cast<float>(hvd::rank() + 1));
  hvd::allreduce(std::span<float>(grad), hvd::op::average);
  // Every rank's rank, in rank order.
  int64_t me = hvd::rank();
  auto ranks = hvd::allgather(std::span<const int64_t>(&me, 1));
  // Two gradients reduced in one fused operation.
  std::vector<float> w1(1000, 1.0f), w2(10, 2.0f);
  auto h1 = hvd::allreduce_async(std::span<float>(w1), hvd::op::sum, "grad/w1");
  auto h2 = hvd::allreduce_async(std::span<float>(w2), hvd::op::sum, "grad/w2");
  hvd::synchronize(h1);
  hvd::synchronize(h2);
  std::string ranks_text;
  for (auto r : ranks)
    ranks_text += " " + std::to_string(r);
  auto text = "rank " + std::to_string(hvd::rank()) + " of " + std::to_string(hvd::size())
              + ": average " + std::to_string(grad[0]) + ", ranks" + ranks_text + ", w1 sum "
              + std::to_string(w1[0]) + ", w2 sum " + std::to_string(w2[0]);
  hvd::shutdown();
  return text;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  int cpus = rt.options().num_cpus; // 0 when joining a cluster (--address)
  int workers = cpus > 0 ? std::min(4, cpus) : 4;
  for (size_t i = 1; i + 1 < rt.args().size(); ++i)
    if (rt.args()[i] == "--num-workers")
      workers = std::stoi(rt.args()[i + 1]);
  try {
    hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = workers}};
    ex.start();
    for (auto& line : ex.run(&train_step, 1 << 20))
      std::printf("%s\n", line.c_str());
    ex.shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce failed: %s\n", e.what());
    return 1;
  }
}
