#include "load.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

namespace hvactor::bench_tool {

int busy_load::usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0)
    return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

busy_load::busy_load(int per_core) {
  int n = per_core * usable_cores();
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    threads_.emplace_back([this] {
      ::pthread_setname_np(::pthread_self(), "bench.load");
      // Plain arithmetic at the default priority, never sleeping: what a
      // compute thread looks like to the scheduler.
      volatile uint64_t x = 0;
      while (!stop_.load(std::memory_order_relaxed))
        for (int k = 0; k < 4096; ++k)
          x = x * 6364136223846793005ULL + 1;
    });
}

busy_load::~busy_load() {
  stop_.store(true);
  for (auto& t : threads_)
    t.join();
}

} // namespace hvactor::bench_tool
