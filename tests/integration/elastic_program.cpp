// An SPMD program for elastic hvactor-run (elastic_test): trains epochs
// under hvd::elastic::run, commits every epoch and prints one line per
// commit on rank 0 and "FINISHED rank=R size=S" at the end.
//
//   elastic_program EPOCHS EPOCH_MS

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

int main(int argc, char** argv) {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 20;
  int epoch_ms = argc > 2 ? std::atoi(argv[2]) : 50;
  hvd::init();
  std::printf("STARTED rank=%d size=%d pid=%d host=%s\n", hvd::rank(), hvd::size(),
              static_cast<int>(::getpid()), std::getenv("HOROVOD_HOSTNAME"));
  std::fflush(stdout);
  hvd::elastic::object_state<int64_t> st{0};
  hvd::elastic::run(st, [&](auto& s) {
    auto& epoch = s.template value<0>();
    while (epoch < epochs) {
      std::vector<float> grad(64, 1.0f);
      hvd::allreduce(std::span<float>(grad), hvd::op::sum);
      std::this_thread::sleep_for(std::chrono::milliseconds(epoch_ms));
      ++epoch;
      s.commit();
      if (hvd::rank() == 0) {
        std::printf("COMMIT epoch=%lld size=%d\n", static_cast<long long>(epoch), hvd::size());
        std::fflush(stdout);
      }
    }
  });
  std::printf("FINISHED rank=%d size=%d\n", hvd::rank(), hvd::size());
  return 0;
}
