#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "hvactor/serialization.hpp"

namespace hvactor {

namespace detail {

/// Shared state of one asynchronous remote call.
class pending_result {
public:
  void set_value(std::vector<char> payload);
  void set_error(std::exception_ptr error);
  bool ready() const;
  /// Waits until the call ended; throws its error. `timeout` bounds a call
  /// whose worker is alive but never answers.
  std::vector<char> wait(std::chrono::milliseconds timeout);

private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<char> payload_;
  std::exception_ptr error_;
};

} // namespace detail

/// The result of one worker's remote call (run_remote); `get()` blocks.
template <class R>
class future {
public:
  future() = default;
  future(std::shared_ptr<detail::pending_result> st, std::chrono::milliseconds timeout)
    : st_(std::move(st)), timeout_(timeout) {
  }

  /// Waits for the result; throws worker_error if the call failed.
  R get() {
    auto payload = st_->wait(timeout_);
    if constexpr (!std::is_void_v<R>)
      return std::get<0>(detail::unpack<R>(payload));
  }

  /// True once get() would not block.
  bool ready() const {
    return st_ && st_->ready();
  }

  bool valid() const noexcept {
    return st_ != nullptr;
  }

private:
  std::shared_ptr<detail::pending_result> st_;
  std::chrono::milliseconds timeout_{0};
};

} // namespace hvactor
