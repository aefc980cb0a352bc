#pragma once

// Busy threads for tests of collectives under load (issue 28): what a
// training job's compute threads look like to the scheduler.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace hvactor::test {

/// `per_core` busy threads per online core for the object's lifetime.
class busy_threads {
public:
  explicit busy_threads(int per_core) {
    auto cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    for (long i = 0; i < per_core * cores; ++i)
      threads_.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop_.load(std::memory_order_relaxed))
          for (int k = 0; k < 4096; ++k)
            x = x * 6364136223846793005ULL + 1;
      });
  }
  ~busy_threads() {
    stop_ = true;
    for (auto& t : threads_)
      t.join();
  }
  busy_threads(const busy_threads&) = delete;
  busy_threads& operator=(const busy_threads&) = delete;

private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

} // namespace hvactor::test
