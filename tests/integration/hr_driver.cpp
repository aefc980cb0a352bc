// A driver for horovod_runner's tests (train_test.cpp): runs `work` with
// HorovodRunner's np and log verbosity and prints rank 0's value.
//   hr_driver [--address HEAD:PORT] --np N [--verbosity all|log_callback_only]
// Prints "result value=V size=S" (exit 0), or "thrown ..." (exit 2), and
// "driver host=<this machine's host name>".

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <hvactor/hvactor.hpp>

namespace {

struct outcome {
  int value = 0;
  int size = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outcome& x) {
  return f(x.value, x.size);
}

outcome work(int base) {
  int rank = std::atoi(std::getenv("HOROVOD_RANK"));
  int size = std::atoi(std::getenv("HOROVOD_SIZE"));
  std::printf("hello from rank %d of %d\n", rank, size);
  std::fprintf(stderr, "warning from rank %d\n", rank);
  hvactor::log::event({{"rank", std::to_string(rank)}, {"step", "done"}});
  hvactor::log::event({{"host", std::getenv("HOROVOD_HOSTNAME")}, {"rank", std::to_string(rank)}});
  return {base + 10 * rank, size};
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 2}};
  int np = 0;
  std::string verbosity = "all";
  auto& args = rt.args();
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] == "--np")
      np = std::stoi(args[i + 1]);
    else if (args[i] == "--verbosity")
      verbosity = args[i + 1];
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::printf("driver host=%s\n", host);
  try {
    hvactor::horovod_runner hr{rt, {.np = np, .driver_log_verbosity = verbosity}};
    outcome out = hr.run(&work, 7);
    std::printf("result value=%d size=%d\n", out.value, out.size);
    return 0;
  } catch (const std::exception& e) {
    std::printf("thrown %s\n", e.what());
    return 2;
  }
}
