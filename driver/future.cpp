#include "hvactor/future.hpp"

#include "hvactor/errors.hpp"

namespace hvactor::detail {

void pending_result::set_value(std::vector<char> payload) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    payload_ = std::move(payload);
    done_ = true;
  }
  cv_.notify_all();
}

void pending_result::set_error(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

bool pending_result::ready() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return done_;
}

std::vector<char> pending_result::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard{mtx_};
  if (!cv_.wait_for(guard, timeout, [this] { return done_; }))
    throw worker_error("run_remote: no result within call_timeout ("
                       + std::to_string(timeout.count()) + " ms)");
  if (error_)
    std::rethrow_exception(error_);
  return payload_;
}

} // namespace hvactor::detail
