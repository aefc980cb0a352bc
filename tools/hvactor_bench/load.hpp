#pragma once

// hvactor-bench --load N: N load threads per usable core, competing for the
// CPUs with the measured ranks and peers for the whole run. --load-kind
// spin (the default): each thread computes and never sleeps, as a training
// job's compute threads do while gradients are reduced during backward;
// fork: each thread starts /bin/true over and over, as shell loops and data
// loaders that fork short processes do.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace hvactor::bench_tool {

enum class load_type { spin, fork };

/// "spin" or "fork"; throws std::invalid_argument otherwise.
load_type parse_load_kind(const std::string& text);
const char* to_string(load_type kind);

class busy_load {
public:
  /// Starts `per_core` x (usable cores) threads (none for 0).
  explicit busy_load(int per_core, load_type kind = load_type::spin);
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
