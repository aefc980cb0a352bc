#pragma once

// Internal: a worker's reports without a checkpoint, handed to the driver
// in the background. report() queues the report and returns; an actor of
// the worker's process sends the queued reports to the driver's
// train_progress actor in order, up to reports_sent_ahead unanswered (the
// driver keeps them until their turn and answers report i once every rank
// sent it and the trainer took it). The
// first refusal, timeout or lost driver is kept and thrown by the next
// report() or drain(). At most reports_in_flight reports and
// report_bytes_in_flight bytes of metrics wait; a report beyond them
// waits for room (bounded by the report limit).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "train/internal/train_progress.hpp"

namespace hvactor::train {

class report_pipe {
public:
  /// Sends to `progress`, each report awaited at most `limit`.
  report_pipe(caf::actor_system& sys, train_progress progress, std::chrono::milliseconds limit);
  ~report_pipe();
  report_pipe(const report_pipe&) = delete;
  report_pipe& operator=(const report_pipe&) = delete;

  /// Queues `r`; throws hvactor::error with the first failure of an
  /// earlier report, or when no room frees up within the limit.
  void push(train_report r);
  /// Waits until every queued report is answered; throws as push().
  void drain();

  /// What the sender shares with the waiting thread.
  struct shared {
    std::mutex mx;
    std::condition_variable cv;
    size_t queued = 0;
    size_t queued_bytes = 0;
    std::optional<std::string> failure;
  };

private:
  void wait_until(const char* what, size_t reports, size_t bytes);

  std::shared_ptr<shared> state_;
  caf::actor sender_;
  std::chrono::milliseconds limit_;
};

} // namespace hvactor::train
