// A worker's reports without a checkpoint, sent in the background, in
// order (internal/report_pipe.hpp).

#include "train/internal/report_pipe.hpp"

#include <deque>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor::train {

namespace {

struct sender_state {
  static inline const char* name = "train_report_pipe";
  /// Not sent yet.
  std::deque<train_report> queue;
  size_t in_flight = 0;
};

using sender_actor = caf::stateful_actor<sender_state>*;

void fail(sender_actor self, report_pipe::shared& sh, std::string why) {
  self->state.queue.clear();
  std::lock_guard<std::mutex> guard{sh.mx};
  if (!sh.failure)
    sh.failure = std::move(why);
  sh.queued = 0;
  sh.queued_bytes = 0;
  sh.cv.notify_all();
}

void send_next(sender_actor self, std::shared_ptr<report_pipe::shared> sh,
               const train_progress& progress, std::chrono::milliseconds limit) {
  auto& st = self->state;
  while (st.in_flight < reports_sent_ahead && !st.queue.empty()) {
    auto r = std::move(st.queue.front());
    st.queue.pop_front();
    ++st.in_flight;
    auto index = r.index;
    auto rank = r.rank;
    auto bytes = r.metrics.size();
    self->request(progress, wait_bound(limit), tr_report_atom_v, std::move(r))
      .then(
        [=](const std::string& ack) {
          --self->state.in_flight;
          if (!ack.empty())
            return fail(self, *sh, "train::report: " + ack);
          {
            std::lock_guard<std::mutex> guard{sh->mx};
            if (sh->failure)
              return; // fail() dropped the counts
            sh->queued -= 1;
            sh->queued_bytes -= bytes;
            sh->cv.notify_all();
          }
          send_next(self, sh, progress, limit);
        },
        [=](caf::error& e) {
          --self->state.in_flight;
          if (e == caf::sec::request_timeout)
            return fail(self, *sh,
                        fmt::format("train::report: report {} of rank {} was not acknowledged "
                                    "within {} ms: every worker must call report() the same "
                                    "number of times (or the driver stopped answering)",
                                    index + 1, rank, limit.count()));
          fail(self, *sh,
               fmt::format("train::report: report {} of rank {}: {}", index + 1, rank,
                           describe(e)));
        });
  }
}

caf::behavior sender_impl(sender_actor self, std::shared_ptr<report_pipe::shared> sh,
                          train_progress progress, std::chrono::milliseconds limit) {
  // The driver gone fails what waits at once, not after the limit.
  self->monitor(progress);
  self->set_down_handler([=](caf::down_msg& dm) {
    fail(self, *sh, fmt::format("train::report: the driver's progress actor is gone ({})",
                                describe(dm.reason)));
  });
  return {
    [=](train_report& r) {
      self->state.queue.push_back(std::move(r));
      send_next(self, sh, progress, limit);
    },
  };
}

} // namespace

report_pipe::report_pipe(caf::actor_system& sys, train_progress progress,
                         std::chrono::milliseconds limit)
  : state_(std::make_shared<shared>()), limit_(limit) {
  sender_ = sys.spawn(sender_impl, state_, std::move(progress), limit);
}

report_pipe::~report_pipe() {
  caf::anon_send_exit(sender_, caf::exit_reason::user_shutdown);
}

void report_pipe::wait_until(const char* what, size_t reports, size_t bytes) {
  std::unique_lock<std::mutex> lock{state_->mx};
  auto room = [&] {
    return state_->failure || (state_->queued <= reports && state_->queued_bytes <= bytes);
  };
  // The report in flight is answered (or fails) within the limit: each
  // round waits for one answer at most.
  while (!room()) {
    auto before = state_->queued;
    if (!state_->cv.wait_for(lock, wait_bound(limit_) + std::chrono::seconds{5},
                             [&] { return room() || state_->queued != before; }))
      throw error(fmt::format("train::report: the driver answered no report within {} ms ({})",
                              limit_.count(), what));
  }
  if (state_->failure)
    throw error(*state_->failure);
}

void report_pipe::push(train_report r) {
  auto bytes = r.metrics.size();
  wait_until("waiting for room", reports_in_flight - 1, report_bytes_in_flight - bytes);
  {
    std::lock_guard<std::mutex> guard{state_->mx};
    state_->queued += 1;
    state_->queued_bytes += bytes;
  }
  caf::anon_send(sender_, std::move(r));
}

void report_pipe::drain() {
  wait_until("waiting for the reports to be answered", 0, 0);
}

} // namespace hvactor::train
