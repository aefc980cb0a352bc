#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "base/internal/program_libraries.hpp"
#include "actors/internal/interfaces.hpp"
#include "hvactor/settings.hpp"

namespace hvactor {

/// The driver's direct call in flight (job_session::call_all sends it to
/// the workers itself, one request id for all of them): how the coordinator
/// wakes it when the job fails meanwhile, since the driver's blocking actor
/// waits only for answers to that id. Shared by the session and the
/// coordinator; the mutex guards `caller` and `call`.
class direct_calls {
public:
  /// The job failed or is shutting down: later calls go through the
  /// coordinator, and the call in flight, if any, gets `err` now.
  void end(const caf::error& err);

  /// Whether end() was called.
  bool ended() const noexcept {
    return ended_.load();
  }

  /// A call with request id `call` from `caller` begins; false (and nothing
  /// recorded) when the job already ended.
  bool begin(caf::strong_actor_ptr caller, caf::message_id call);

  /// The call in flight was answered.
  void finish();

private:
  std::atomic<bool> ended_{false};
  std::mutex mu_;
  caf::strong_actor_ptr caller_;
  std::optional<caf::message_id> call_;
};

/// Everything a coordinator needs to run one job.
struct coordinator_config {
  std::string job_id;
  hvactor::settings settings;
  executor_options options;
  /// Where live nodes come from (the head's registry, or the embedded
  /// cluster's); nodes are used in its join order.
  proto::node_registry registry;
  /// Binary and argv the workers run (the driver's own).
  std::string executable;
  /// SHA-256 of `executable`; nodes that cache binaries get it shipped
  /// (when they lack it) and run their cached copy.
  std::string binary_hash;
  /// The executable's own libraries, shipped and cached with it.
  std::vector<program_library> libraries;
  /// hvactor-run: `executable` is the user's SPMD program, started with its
  /// Horovod variables and no hvactor worker; the job ends when every
  /// process exited (finished_atom).
  bool launch = false;
  /// Executor jobs: what happens to the workers' stdout and stderr
  /// (proto::output_inherit, output_forward to on_output, output_drop).
  int32_t output = proto::output_inherit;
  /// hvactor-run (and executor jobs with output_forward): each line a process writes (stream 1 stdout, 2 stderr),
  /// called in the coordinator, in arrival order per rank.
  std::function<void(int rank, int stream, const std::string& line)> on_output;
  /// hvactor::log::event from any process, in arrival order.
  std::function<void(int rank, const std::map<std::string, std::string>& fields)> on_event;
  std::vector<std::string> args;
  /// The driver's direct calls, ended by the job's failure or shutdown.
  std::shared_ptr<direct_calls> direct = std::make_shared<direct_calls>();
  /// The job's rendezvous store (elastic jobs publish each generation's
  /// assignments there).
  proto::rendezvous_store store;
  /// Nodes to use first, in this order (hvactor-run in a Slurm allocation:
  /// the allocation's order, so rank 0 is on its first node); the others
  /// follow in join order.
  std::vector<std::string> node_order;
};

/// Spawns the coordinator of one job (protocol: interfaces.hpp;
/// coordinator_state.hpp): an elastic job when `cfg.options.min_workers`
/// is set, else a static one.
proto::coordinator spawn_coordinator(caf::actor_system& sys, coordinator_config cfg);

} // namespace hvactor
