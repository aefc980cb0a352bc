#pragma once

// hvactor-bench --load N: N busy threads per usable core, competing for the
// CPUs with the measured ranks and peers for the whole run, as a training
// job's compute threads do while gradients are reduced during backward.

#include <atomic>
#include <thread>
#include <vector>

namespace hvactor::bench_tool {

class busy_load {
public:
  /// Starts `per_core` x (usable cores) threads (none for 0).
  explicit busy_load(int per_core);
  /// Stops and joins them.
  ~busy_load();
  busy_load(const busy_load&) = delete;
  busy_load& operator=(const busy_load&) = delete;

  /// The threads running.
  int threads() const noexcept {
    return static_cast<int>(threads_.size());
  }

  /// The cores this process may run on (its affinity mask).
  static int usable_cores();

private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

} // namespace hvactor::bench_tool
