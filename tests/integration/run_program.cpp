// The SPMD program the hvactor-run tests launch (it is not an hvactor
// driver: it only calls hvd::init()).
//   run_program ranks        allreduce, "rank R of N sum S", a stderr line, an event
//   run_program fail R       the same, then rank R exits with status 3
//   run_program where        the same, then "where rank=R host=H local=L cvd=C"
//   run_program info         the same, then "info rank=R <hvd::backend_info()>"
//   run_program sleep        prints "pid P", then sleeps 60 s
//   run_program lines MIB    prints MIB MiB of 100-byte lines "RANK SEQ xxx" (no hvd::init)
//   run_program env VAR...   prints "env rank=R VAR=VALUE ..." ("VAR=-" when unset; no
//                            hvd::init)

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "ranks";
  if (mode == "sleep") {
    std::printf("pid %d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    ::sleep(60);
    return 0;
  }
  if (mode == "lines") {
    const char* rank = std::getenv("HOROVOD_RANK");
    long lines = (argc > 2 ? std::atol(argv[2]) : 1) * 1048576 / 100;
    std::string pad(100 - 12 - std::strlen(rank ? rank : "0"), 'x');
    for (long i = 0; i < lines; ++i)
      std::printf("%s %09ld %s\n", rank ? rank : "0", i, pad.c_str());
    return 0;
  }
  if (mode == "env") {
    const char* rank = std::getenv("HOROVOD_RANK");
    std::string line = std::string{"env rank="} + (rank ? rank : "-");
    for (int i = 2; i < argc; ++i) {
      const char* v = std::getenv(argv[i]);
      line += std::string{" "} + argv[i] + "=" + (v ? v : "-");
    }
    std::printf("%s\n", line.c_str());
    return 0;
  }
  hvd::init();
  std::vector<float> x{1.0f};
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  int rank = hvd::rank();
  std::printf("rank %d of %d sum %g\n", rank, hvd::size(), x[0]);
  std::fflush(stdout);
  std::fprintf(stderr, "stderr of rank %d\n", rank);
  hvactor::log::event({{"rank", std::to_string(rank)}, {"loss", "0.25"}});
  if (mode == "where") {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    std::printf("where rank=%d host=%s local=%d cvd=%s\n", rank,
                std::getenv("HOROVOD_HOSTNAME") ? std::getenv("HOROVOD_HOSTNAME") : "?",
                hvd::local_rank(), cvd ? cvd : "-");
    std::fflush(stdout);
  }
  if (mode == "info") {
    std::printf("info rank=%d %s\n", rank, hvd::backend_info().c_str());
    std::fflush(stdout);
  }
  hvd::shutdown();
  if (mode == "fail" && argc > 2 && rank == std::atoi(argv[2]))
    return 3;
  return 0;
}
