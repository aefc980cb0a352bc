#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "collectives/backends/backend.hpp"

namespace hvactor::collectives {

/// The cross-node half of a pipelined hierarchical allreduce
/// (host_backend): a thread that runs the jobs handed to it, in order,
/// each a call on the cross-node backend. Destroyed before every job ran
/// (the caller failed), it drops the jobs not yet started and interrupts
/// the running one, so that nothing outlives the call.
class cross_pipeline {
public:
  explicit cross_pipeline(backend& cross);
  cross_pipeline(const cross_pipeline&) = delete;
  cross_pipeline& operator=(const cross_pipeline&) = delete;
  ~cross_pipeline();

  void submit(std::function<void()> job);

  /// Waits until the first `n` jobs finished; rethrows the first failure.
  /// Every job's own waits are bounded (the backend's timeout).
  void wait(size_t n);

private:
  void run();

  backend& cross_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t done_ = 0;
  bool running_ = false;
  bool closed_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

} // namespace hvactor::collectives
