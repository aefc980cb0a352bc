#pragma once

// Internal: what happens to a job, for whoever watches it without steering
// it. The coordinator tells its observer (the dashboard's,
// actors/board/coordinator_board.cpp) about the job's events; the
// observer reads the coordinator's state and changes nothing the job
// depends on.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/coordinator/job_kind.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::detail {

class job_observer {
public:
  virtual ~job_observer() = default;

  /// start() began.
  virtual void started(coord_actor self) = 0;
  /// Something the job shows may have changed (its phase, a registration,
  /// a generation, ...).
  virtual void changed(coord_actor self) = 0;
  /// The observer's own timer (board_due_atom) fired.
  virtual void due(coord_actor self) = 0;
  /// The job stopped: `then` runs once the observer is done with it.
  virtual void ended(coord_actor self, std::function<void()> then) = 0;

  /// A worker's process exited; a worker failed (`why` completes "worker
  /// 3 on node 'n1' (pid 42) ...").
  virtual void worker_exited(coord_actor self, const proto::worker_exit& ex) = 0;
  virtual void worker_failed(coord_actor self, int32_t id, const std::string& why) = 0;
  /// A line a worker wrote; its CPU time and memory; an event it raised;
  /// its collective totals (replacing its earlier ones).
  virtual void output(coord_actor self, int32_t id, const std::string& line) = 0;
  virtual void usage(coord_actor self, const proto::rank_stats& stats) = 0;
  virtual void event(coord_actor self, const std::string& encoded) = 0;
  virtual void totals(coord_actor self, int32_t id, std::vector<proto::op_stat> ops) = 0;
};

/// The dashboard: the job's view for the head's registry.
std::unique_ptr<job_observer> make_board_observer();

} // namespace hvactor::detail
