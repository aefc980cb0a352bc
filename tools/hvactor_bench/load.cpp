#include "tools/hvactor_bench/load.hpp"

#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

extern char** environ;

namespace hvactor::bench_tool {

int busy_load::usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0)
    return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

load_type parse_load_kind(const std::string& text) {
  if (text == "spin")
    return load_type::spin;
  if (text == "fork")
    return load_type::fork;
  throw std::invalid_argument("--load-kind must be spin or fork (got '" + text + "')");
}

const char* to_string(load_type kind) {
  return kind == load_type::spin ? "busy" : "forking";
}

busy_load::busy_load(int per_core, load_type kind) {
  int n = per_core * usable_cores();
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    threads_.emplace_back([this, kind] {
      ::pthread_setname_np(::pthread_self(), "bench.load");
      if (kind == load_type::fork) {
        // A short process after another, as a shell loop runs them: each
        // takes a core for a moment, again and again.
        char name[] = "true";
        char* argv[] = {name, nullptr};
        while (!stop_.load(std::memory_order_relaxed)) {
          pid_t pid = 0;
          if (::posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0)
            break;
          ::waitpid(pid, nullptr, 0);
        }
        return;
      }
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
