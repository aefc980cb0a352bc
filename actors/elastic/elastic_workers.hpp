#pragma once

// The worker processes of an elastic job as plain bookkeeping (no actors, no
// I/O), after Horovod's WorkerStateRegistry (runner/elastic/registration.py)
// with what hvactor adds: what each worker holds on its node. A worker asks
// for a reservation, gets it, then a colocator that owns it; whenever it
// ends (it left, exited, failed or was stopped) the registry says what to
// give back, so that nothing stays reserved for a worker that no longer
// exists (a host dropped and listed again by discovery must be usable at
// once). The elastic coordinator feeds it events and carries out its
// answers.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/elastic/elastic_policy.hpp"

namespace hvactor::elastic {

/// What a worker holds on its node.
enum class holding {
  /// Nothing: not asked yet, or everything was given back.
  nothing,
  /// Its reservation was asked for; no answer yet.
  asked,
  /// Reserved; no colocator owns the reservation yet.
  reservation,
  /// Its colocator runs and owns the reservation.
  colocator,
  /// Its colocator was told to stop (it releases the reservation once its
  /// process is reaped).
  stopping,
};

/// Where a worker is in its life.
enum class worker_phase {
  /// Started, not registered yet.
  starting,
  /// Registered with the coordinator.
  running,
  /// Not in the current world any more; it exits on its own (or is stopped
  /// after its grace).
  leaving,
  /// Its process ended, failed or was stopped.
  gone,
};

/// What the coordinator must do after an event.
enum class give_back {
  none,
  /// Tell the node to release the worker's reservation.
  release_reservation,
  /// Tell the worker's colocator to stop (it then releases the reservation);
  /// report its answer with colocator_stopped().
  stop_colocator,
};

struct worker_record {
  int64_t id = 0;
  std::string host;
  worker_phase phase = worker_phase::starting;
  holding held = holding::nothing;
};

class worker_registry {
public:
  /// A new worker on `host`, about to ask for its reservation; ids increase
  /// with start order (older workers have smaller ids).
  int64_t add(const std::string& host);

  /// Its reservation was granted: release_reservation when the worker is
  /// gone meanwhile.
  give_back reserved(int64_t id);

  /// Its reservation was refused (it holds nothing).
  void reserve_failed(int64_t id);

  /// Its colocator started: stop_colocator when the worker is gone
  /// meanwhile.
  give_back colocated(int64_t id);

  /// The worker registered with the coordinator.
  void registered(int64_t id);

  /// The worker is not in the new world (its host went away, or fewer slots).
  void leave(int64_t id);

  /// The worker ended, whatever the reason; returns what to give back (only
  /// the first call for a worker; later ones give none).
  give_back gone(int64_t id);

  /// Its colocator answered the stop (or is gone): the worker holds nothing.
  void colocator_stopped(int64_t id);

  const worker_record* find(int64_t id) const;

  /// Whether the worker exists and is gone; unknown ids count as gone.
  bool is_gone(int64_t id) const;

  /// Workers neither gone nor leaving, by id (oldest first).
  std::vector<int64_t> live() const;

  /// Gone workers that hold a reservation or a running colocator nobody
  /// was told to give back (a bug when not empty).
  std::vector<int64_t> leaked() const;

  const std::map<int64_t, worker_record>& all() const noexcept {
    return workers_;
  }

private:
  worker_record& at(int64_t id);

  std::map<int64_t, worker_record> workers_;
  int64_t next_id_ = 0;
};

} // namespace hvactor::elastic
