#pragma once

// Internal: a stop asked for from another thread (hvactor-run's signal
// waiter), and the wake-up of the thread that waits on a job meanwhile.
//
// hvactor-run's main thread used to poll a stop flag while its job ran
// (every 100 ms, its --driver mode every 50 ms): 10-20 wake-ups a second
// for the whole job. Now it sleeps until the job ends or a stop comes.

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace hvactor {

class stop_request {
public:
  /// Asks for a stop with signal `sig` (non-zero), waking wait(). Thread-safe.
  void request(int sig) {
    {
      std::lock_guard<std::mutex> lock{mtx_};
      sig_ = sig;
    }
    cv_.notify_all();
  }

  /// The signal a stop was asked with; 0 while none was.
  int signal() const noexcept {
    return sig_.load();
  }

  /// What wait() checks changed (the job ended): wakes it. Thread-safe.
  void notify() {
    { std::lock_guard<std::mutex> lock{mtx_}; } // a waiter is in wait() or sees the change
    cv_.notify_all();
  }

  /// Sleeps until `done()` holds or a stop was asked for. `done` is checked
  /// under the lock, before the first sleep and after every notify().
  template <class Done>
  void wait(Done done) {
    std::unique_lock<std::mutex> lock{mtx_};
    cv_.wait(lock, [&] { return sig_.load() != 0 || done(); });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::atomic<int> sig_{0};
};

} // namespace hvactor
