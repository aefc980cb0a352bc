#include "collectives/backends/cross_pipeline.hpp"

#include <utility>

namespace hvactor::collectives {

cross_pipeline::cross_pipeline(backend& cross) : cross_(cross), thread_([this] { run(); }) {
}

cross_pipeline::~cross_pipeline() {
  bool running;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    running = running_;
  }
  cv_.notify_all();
  if (running)
    cross_.interrupt("hvd: the node-local part of this hierarchical allreduce failed");
  thread_.join();
}

void cross_pipeline::submit(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void cross_pipeline::wait(size_t n) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_ >= n || error_; });
  if (error_)
    std::rethrow_exception(error_);
}

void cross_pipeline::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
      if (closed_)
        return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = true;
    }
    try {
      job();
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      running_ = false;
      cv_.notify_all();
      return;
    }
    {
      std::lock_guard lock(mutex_);
      running_ = false;
      ++done_;
    }
    cv_.notify_all();
  }
}

} // namespace hvactor::collectives
