// A driver that starts 4 workers, prints their pids ("PIDS 1 2 3 4") and
// then waits inside a long remote call, for a test to SIGKILL it.

#include <unistd.h>

#include <cstdio>

#include <hvactor/hvactor.hpp>

namespace {

int sleep_long() {
  ::sleep(60);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv, {.num_cpus = 4}};
  hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = 4}};
  ex.start();
  std::printf("PIDS");
  for (int pid : ex.worker_pids())
    std::printf(" %d", pid);
  std::printf("\n");
  std::fflush(stdout);
  ex.run(&sleep_long);
  return 0;
}
