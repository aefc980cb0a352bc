// The driver's direct call in flight and how a job's end wakes it
// (coordinator.hpp).

#include "actors/internal/coordinator.hpp"

namespace hvactor {

void direct_calls::end(const caf::error& err) {
  ended_ = true;
  std::lock_guard<std::mutex> guard{mu_};
  if (!call_ || !caller_)
    return;
  // An answer to the call's request id, so that the waiting receive takes it.
  caller_->enqueue(caf::make_mailbox_element(nullptr, call_->response_id(), {}, err), nullptr);
  call_.reset();
}

bool direct_calls::begin(caf::strong_actor_ptr caller, caf::message_id call) {
  std::lock_guard<std::mutex> guard{mu_};
  if (ended_)
    return false;
  caller_ = std::move(caller);
  call_ = call;
  return true;
}

void direct_calls::finish() {
  std::lock_guard<std::mutex> guard{mu_};
  call_.reset();
}

} // namespace hvactor
