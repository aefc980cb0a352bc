// CAF 0.17's work stealing without timed polling (internal/quiet_scheduler.hpp).
// The policy plugs into CAF's own scheduler::coordinator and
// scheduler::worker templates, as caf::policy::work_stealing does.
#include "base/internal/quiet_scheduler.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>

#include <caf/actor_system.hpp>
#include <caf/detail/double_ended_queue.hpp>
#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/coordinator.hpp>

namespace hvactor::quiet_scheduler {

namespace {

class quiet_stealing : public caf::policy::unprofiled {
public:
  using queue_type = caf::detail::double_ended_queue<caf::resumable>;

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*) {
    }
    std::atomic<size_t> next_worker{0};
  };

  struct worker_data {
    explicit worker_data(caf::scheduler::abstract_coordinator*) {
    }
    // CAF copies one initial value into every worker: each gets its own.
    worker_data(const worker_data&) {
    }
    queue_type queue;
    std::mutex lock;            // guards the sleep and `hint`
    std::condition_variable cv;
    std::atomic<bool> sleeping{false};
    bool hint = false;          // woken to steal, not for its own queue
    std::atomic<size_t> victim{0};
  };

  /// From outside the workers: a sleeping thread takes it at once; a busy
  /// one would keep it waiting behind its current job.
  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    auto n = self->num_workers();
    auto first = d(self).next_worker.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      auto w = self->worker_by_id((first + i) % n);
      if (d(w).sleeping.load(std::memory_order_relaxed)) {
        w->external_enqueue(job);
        return;
      }
    }
    self->worker_by_id(first % n)->external_enqueue(job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    auto& me = d(self);
    me.queue.append(job);
    std::lock_guard<std::mutex> guard{me.lock};
    if (me.sleeping.load(std::memory_order_relaxed))
      me.cv.notify_one();
  }

  /// Sent from a handler on this thread: it runs next here. Only when it
  /// queues behind other work is a sleeping thread woken to steal.
  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    bool behind = !d(self).queue.empty();
    d(self).queue.prepend(job);
    if (behind)
      wake_thief(self);
  }

  /// An actor that used up its throughput goes to the back of the queue.
  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    bool behind = !d(self).queue.empty();
    d(self).queue.append(job);
    if (behind)
      wake_thief(self);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    auto& me = d(self);
    for (;;) {
      if (auto job = me.queue.take_head())
        return job;
      if (auto job = steal(self))
        return job;
      std::unique_lock<std::mutex> guard{me.lock};
      me.sleeping = true;
      // external_enqueue appends before it takes the lock: a job given
      // to us after this check finds us sleeping and notifies.
      me.cv.wait(guard, [&] { return me.hint || !me.queue.empty(); });
      me.hint = false;
      me.sleeping = false;
    }
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker* self, UnaryFunction f) {
    for (auto job = d(self).queue.take_head(); job != nullptr; job = d(self).queue.take_head())
      f(job);
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator*, UnaryFunction) {
    // no central queue
  }

private:
  /// The oldest job of another worker's queue, looking at each once.
  template <class Worker>
  caf::resumable* steal(Worker* self) {
    auto parent = self->parent();
    auto n = parent->num_workers();
    auto first = d(self).victim.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      auto id = (first + i) % n;
      if (id == self->id())
        continue;
      auto& other = d(parent->worker_by_id(id));
      if (other.queue.empty())
        continue;
      if (auto job = other.queue.take_tail())
        return job;
    }
    return nullptr;
  }

  /// Wakes one sleeping worker other than `self` to look for work.
  template <class Worker>
  void wake_thief(Worker* self) {
    auto parent = self->parent();
    auto n = parent->num_workers();
    for (size_t i = 1; i < n; ++i) {
      auto& other = d(parent->worker_by_id((self->id() + i) % n));
      if (!other.sleeping.load(std::memory_order_relaxed))
        continue;
      std::lock_guard<std::mutex> guard{other.lock};
      if (!other.sleeping.load(std::memory_order_relaxed))
        continue;
      other.hint = true;
      other.cv.notify_one();
      return;
    }
  }
};

} // namespace

void install(caf::actor_system_config& cfg) {
  // CAF creates its default scheduler only when no module has the
  // scheduler's id (actor_system.cpp, 0.17.6).
  cfg.module_factories.push_back([](caf::actor_system& sys) -> caf::actor_system::module* {
    return new caf::scheduler::coordinator<quiet_stealing>(sys);
  });
}

} // namespace hvactor::quiet_scheduler
