#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace hvactor {

/// Bytes of one rank's output that hvactor-run may hold unwritten.
constexpr uint64_t output_window_bytes = 4u << 20;

/// The coordinator returns credit in steps of at least this many bytes
/// (fewer acknowledgements); must stay well below output_window_bytes.
constexpr uint64_t output_ack_bytes = 256u << 10;

/// Credit window of one rank's forwarded output (hvactor-run): the monitor
/// thread that reads the rank's pipes takes credit before it sends a line,
/// and waits while `output_window_bytes` or more are still unwritten by the
/// launcher, so that the rank blocks on its own write (back-pressure). One
/// line is let through whenever the window is not full, so a line longer
/// than the window still passes (alone). Thread-safe.
class output_window {
public:
  /// Blocks until the window is not full (or open()), then takes `n` bytes.
  void acquire(uint64_t n) {
    std::unique_lock<std::mutex> lock{mu_};
    cv_.wait(lock, [this] { return open_ || outstanding_ < output_window_bytes; });
    outstanding_ += n;
  }

  /// The launcher wrote `n` more bytes.
  void release(uint64_t n) {
    {
      std::lock_guard<std::mutex> lock{mu_};
      outstanding_ -= n < outstanding_ ? n : outstanding_;
    }
    cv_.notify_all();
  }

  /// No more waiting (the job stops, or the launcher went away).
  void open() {
    {
      std::lock_guard<std::mutex> lock{mu_};
      open_ = true;
    }
    cv_.notify_all();
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t outstanding_ = 0;
  bool open_ = false;
};

} // namespace hvactor
