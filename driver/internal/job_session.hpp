#pragma once

// Internal: one job's lifecycle in the driver process, the same for
// hvactor::executor and hvactor-run (hvactor::launcher).

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/coordinator/coordinator.hpp"
#include "base/internal/actor_system.hpp"
#include "driver/internal/runtime_impl.hpp"

namespace hvactor {

/// Owns one job: its coordinator and rendezvous store, the ports they are
/// published on (each under the runtime's connection watchdog, when it has
/// one), the bounded start, shutdown, and the teardown that closes the
/// ports and ends both actors exactly once (close(), also run by the
/// destructor). Not thread-safe: one thread drives a session.
class job_session {
public:
  /// Spawns the coordinator and the store and publishes them on the
  /// driver's address: the store always (workers rendezvous there), the
  /// coordinator when workers register with it (not for hvactor-run's
  /// launch mode). Throws hvactor::error when a port cannot be published.
  job_session(runtime::impl& rt, coordinator_config cfg);
  ~job_session();

  job_session(const job_session&) = delete;
  job_session& operator=(const job_session&) = delete;

  /// Places the job and starts every worker; blocks until they are ready,
  /// the coordinator fails it, or start_bound() passed.
  caf::expected<proto::job_info> start();

  /// Launch mode: starts the job and, once it ended (every process exited,
  /// or the first failure's grace passed), calls `done` once from a runtime
  /// thread with its outcome or the error that ended it. Returns at once.
  void launch(std::function<void(caf::expected<proto::job_exit>)> done);

  /// Stops every worker and releases every reservation, bounded by the
  /// job's timeout; the coordinator's error when it did not stop cleanly.
  caf::error shutdown();

  /// Closes the ports and ends the actors; idempotent.
  void close() noexcept;

  /// How long start() may take: placement, then registration and the env
  /// hand-out (one timeout each), shipping the binary at 10 MB/s (each
  /// chunk is bounded on its own; this covers a node that is slow but
  /// alive), and slack for the coordinator's own messages.
  std::chrono::milliseconds start_bound() const noexcept {
    return start_bound_;
  }

  /// Runs `req` on every rank and returns the results in world-rank order,
  /// or the call's error (the job's failure when it fails within the call
  /// error grace). From the session's thread, while the job is healthy, the
  /// session's blocking actor calls the workers itself: the coordinator hop
  /// cost about 10 % of the call rate. Otherwise the coordinator makes the
  /// call. `bound` catches a coordinator gone silent.
  caf::expected<proto::call_results> call_all(const proto::call_request& req,
                                              std::chrono::milliseconds bound);

  /// Sends a request to the coordinator and waits for its answer, at most
  /// `timeout`. Reuses one blocking actor per session (creating one per
  /// call cost about 10 % of the call rate) when called from the thread
  /// that created the session and no other call is in flight; otherwise
  /// asks from a fresh one.
  template <class... Rs, class... Ts>
  caf::expected<reply_t<Rs...>> ask(std::chrono::milliseconds timeout, Ts&&... xs) {
    std::unique_lock<std::mutex> lk{caller_mu_, std::try_to_lock};
    if (lk.owns_lock() && std::this_thread::get_id() == owner_)
      return hvactor::ask<Rs...>(**caller_, coord_, timeout, std::forward<Ts>(xs)...);
    lk = {};
    return hvactor::ask<Rs...>(system(), coord_, timeout, std::forward<Ts>(xs)...);
  }

  const proto::coordinator& coordinator() const noexcept {
    return coord_;
  }

  /// The address the driver publishes its actors on.
  const std::string& bind_host() const noexcept {
    return rt_.bind_host;
  }

  caf::actor_system& system() noexcept {
    return *rt_.sys;
  }

  /// The driver's TLS identity (empty: plain).
  const tls::config& tls_identity() const noexcept {
    return rt_.opts.tls;
  }

  /// The job's rendezvous store (in this process).
  const proto::rendezvous_store& store() const noexcept {
    return store_;
  }

  /// The job's settings (timeouts).
  const settings& job_settings() const noexcept {
    return settings_;
  }

private:
  job_session(runtime::impl& rt, coordinator_config cfg, int);
  uint16_t publish(const caf::actor& whom, const char* what);
  caf::expected<proto::call_results> call_workers(caf::blocking_actor& self,
                                                  const proto::call_request& req);
  caf::error hold(caf::blocking_actor& self, caf::error failure);

  runtime::impl& rt_;
  settings settings_;
  proto::coordinator coord_;
  proto::rendezvous_store store_;
  uint16_t coord_port_ = 0;
  uint16_t store_port_ = 0;
  std::chrono::milliseconds start_bound_{0};
  caf::actor launch_waiter_;
  std::thread::id owner_ = std::this_thread::get_id();
  std::mutex caller_mu_;
  std::optional<caf::scoped_actor> caller_;
  bool closed_ = false;
  /// The request id of every direct call, the number of the last one, and
  /// whether the coordinator said the job failed or shut down (job_failed):
  /// later calls go through the coordinator.
  caf::message_id call_id_;
  uint64_t seq_ = 0;
  bool ended_ = false;
  /// The workers (by world rank), their ranks by address and their labels
  /// for error messages, once start() succeeded.
  std::vector<proto::horovod_worker> workers_;
  std::unordered_map<caf::actor_addr, int> rank_of_;
  std::vector<std::string> labels_;
};

} // namespace hvactor
