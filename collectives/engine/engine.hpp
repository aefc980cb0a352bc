#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collectives/tuning/autotune.hpp"
#include "collectives/engine/fusion_executor.hpp"
#include "collectives/backends/allreduce_algorithm.hpp"
#include "collectives/backends/backend.hpp"
#include "collectives/backends/host_paths.hpp"
#include "collectives/engine/fusion_planner.hpp"
#include "hvactor/hvd_types.hpp"
#include "collectives/engine/negotiator.hpp"
#include "collectives/observe/stall_inspector.hpp"
#include "collectives/engine/operation.hpp"
#include "base/internal/knobs_collectives.hpp"

namespace hvactor::collectives {
class timeline;
} // namespace hvactor::collectives

namespace hvactor::hvd::detail {

/// One submitted operation. Fusible ones are async allreduces, packed
/// with other ready ones; every other operation runs alone.
struct pending_op {
  /// What runs; its name is the handle's name ("allreduce.noname.<n>"
  /// when the caller gave none).
  collectives::operation op;
  bool fusible = false;
  /// Submitted by an async call (its handle shows the name).
  bool async = false;
  /// Unnamed: matched by call order (the negotiator's lane).
  bool lane = false;
  /// Its name is held in the engine's names in flight until it finishes
  /// (async calls with a name of the caller's).
  bool holds_name = false;
  /// The negotiator's key (submission order).
  uint64_t id = 0;
  /// The process set whose engine runs it (0: the global set).
  int process_set = 0;
  /// An allreduce of `data` in place (async or not, or a joined rank's
  /// zeros): fused with the round's other allreduces, so that every rank
  /// runs the same batches whichever call each made.
  bool reduce = false;
  void* data = nullptr;
  /// Device allreduces: a CUDA event recorded on the caller's stream when
  /// it submitted (the data is ready once it fired); null otherwise.
  std::shared_ptr<void> ready;
  /// A joined rank's part in an allreduce it did not submit: the zeros,
  /// in the memory of the operation's backend (backend::zeros).
  std::shared_ptr<void> zeros;
  /// Any other operation: runs on the backend of op.device.
  std::function<void(collectives::backend&)> run;
  std::chrono::steady_clock::time_point submitted;
  /// When its first negotiation round started (timeline: QUEUE ends).
  std::chrono::steady_clock::time_point proposed;
  std::promise<void> promise;
  std::shared_future<void> done = promise.get_future().share();
};

/// `p`'s bytes, type, reduction and memory: what the fusion planner sees
/// (engine_execute.cpp).
collectives::fusion_entry entry_of(const pending_op& p);

/// The engine's knobs, read once at hvd::init (hvd.cpp,
/// engine_options_from_env): nothing on the per-call path reads the
/// environment.
struct engine_options {
  /// HOROVOD_FUSION_THRESHOLD: bytes one fused batch may hold.
  size_t fusion_threshold = knobs::default_fusion_threshold;
  /// HOROVOD_CYCLE_TIME: how long a batch may wait for more tensors.
  std::chrono::microseconds cycle_time{knobs::default_cycle_time};
  /// HOROVOD_STALL_CHECK_TIME_SECONDS, _SHUTDOWN_TIME_SECONDS, _DISABLE.
  collectives::stall_settings stall;
  /// HOROVOD_CACHE_CAPACITY: negotiated names the response cache keeps
  /// (0: every round exchanges names).
  size_t cache_capacity = knobs::default_cache_capacity;
  /// The job's timeout; waits give up after twice that (the backend's own
  /// timeouts fire first).
  std::chrono::milliseconds timeout{30000};
  /// Records every operation's phases (HOROVOD_TIMELINE) when set; not
  /// owned, outlives the engine. Unset, each phase costs one null test.
  collectives::timeline* timeline = nullptr;
  /// HOROVOD_TIMELINE_MARK_CYCLES: a CYCLE_START instant at every round
  /// that has work.
  bool timeline_mark_cycles = false;
  /// Gloo's allreduce algorithm per message (HVACTOR_GLOO_ALLREDUCE):
  /// hvd::init hands it to the Gloo backend it creates.
  collectives::allreduce_algorithm_policy gloo_allreduce;
  /// Shared memory and the hierarchical path (HVACTOR_SHM,
  /// HOROVOD_HIERARCHICAL_ALLREDUCE/_ALLGATHER): for the host backend.
  collectives::path_settings paths;
  /// HOROVOD_THREAD_AFFINITY: the core the engine's thread runs on.
  std::optional<int> thread_core;
  /// The process set this engine runs (0: the global set); stamped on
  /// every operation, so that synchronize() finds its engine.
  int process_set_id = 0;
  /// HOROVOD_AUTOTUNE and its knobs (engine_tuning.cpp).
  collectives::autotune_settings autotune;
};

/// Runs the process's collectives (Horovod's background loop): an
/// operation runs once every rank submitted it, in an order every rank
/// shares, whatever order the ranks submitted in (collectives::negotiator
/// decides; this class runs its rounds and the operations). Ready async
/// allreduces are fused up to the threshold. A round starts when the
/// cycle time since the first new submission passed, when someone waits,
/// or when a batch is full; a round that readied nothing waits a cycle
/// (or a new submission) before the next, longer while such rounds go on
/// (a stall: idle_round_due). Each operation runs on the
/// backend its descriptor names: the host backend (Gloo, shared memory),
/// or the device backend for device memory; rounds always use the host
/// backend.
/// Threading: any thread may call; one thread at a time runs rounds (the
/// engine's, or a synchronous caller when the engine is idle).
class engine {
public:
  engine(std::unique_ptr<collectives::backend> b, const collectives::topology& topo,
         engine_options opts);
  ~engine();

  /// Allreduces `data` in place as `op` says (op::average: a sum, then a
  /// division by the number of ranks) and waits. Runs on the calling
  /// thread when nothing is queued (no hand-off), else after the queue, on
  /// the engine's thread.
  void allreduce(const collectives::operation& op, void* data);

  /// Runs `fn` on the backend of `op` as the next operation and waits
  /// (threads as for allreduce()).
  void run(const collectives::operation& op,
           const std::function<void(collectives::backend&)>& fn);

  /// Queues an in-place allreduce of `data` as `op` says.
  std::shared_ptr<pending_op> submit(collectives::operation op, void* data,
                                     std::shared_ptr<void> ready = nullptr);

  /// Queues `fn` to run on the backend of `op` once every rank submitted
  /// `op` (any kind but a fused allreduce: allgather_async, ...); an
  /// unnamed one is named "<kind>.noname.<n>" for its handle and pairs by
  /// call order. `fn` runs on the engine's thread (or a waiter's).
  std::shared_ptr<pending_op> submit_run(collectives::operation op,
                                         std::function<void(collectives::backend&)> fn);

  /// Installs the backend of device tensors (NCCL or host-staged); the host
  /// backend keeps negotiating every batch.
  void set_device_backend(std::unique_ptr<collectives::backend> b);

  /// The host backend (Gloo): the host-staged device path reduces there.
  collectives::backend& host_backend() noexcept {
    return *backend_;
  }

  /// This rank's place among the engine's ranks (a process set's own
  /// numbering for a set's engine).
  const collectives::topology& topo() const noexcept {
    return topo_;
  }

  /// The device backend, or nullptr.
  collectives::backend* device_backend() const noexcept {
    return device_.get();
  }

  /// Every rank's `mine`, in rank order (through the host backend; call it
  /// inside run()).
  std::vector<std::string> gather_strings(const std::string& mine);

  /// Waits for `p`, closing its batch at once; rethrows its error.
  void wait(pending_op& p);

  /// hvd::join(): takes part in the other ranks' allreduces with zeros
  /// until every rank joined; returns the rank that joined last.
  int join();

  /// Records into `tl` from the next round on (nullptr: stops recording);
  /// returns once no round uses the previous timeline any more, so the
  /// caller may close it (hvd::start_timeline / stop_timeline).
  void set_timeline(collectives::timeline* tl, bool mark_cycles);

  /// Finishes what is queued, then stops the thread.
  void stop();

  /// Autotune's changes on this rank, one line each: "exchange N: [values]"
  /// (N counts the exchanges since tuning began, the same on every rank).
  std::vector<std::string> tuning_history();

private:
  template <class Body>
  void run_in_order(const collectives::operation& op, Body& body, void* reduced = nullptr,
                    bool reduce = false);
  void enqueue_locked(const std::shared_ptr<pending_op>& p);
  bool round(bool leave = false);
  bool settle(std::span<const int64_t> header, std::exception_ptr transport);
  void inspect_stalls(const std::shared_ptr<pending_op>& join);
  template <class Body>
  bool solo(const collectives::operation& op, Body& body, void* data, bool reduce);
  // solo()'s steps: the header's exchange (with the data where it fits),
  // running the agreed operation, or queueing it with the round's rest.
  enum class solo_exchange_result { header_only, reduced, not_agreed, agreed_alone };
  solo_exchange_result solo_exchange(const collectives::operation& op, std::vector<int64_t>& header,
                                     void* data, bool reduce, std::exception_ptr& transport);
  template <class Body>
  void solo_run(const collectives::operation& op, Body& body, bool reduced, void* data,
                int64_t negotiated_at);
  void solo_hand_over(const collectives::operation& op,
                      std::function<void(collectives::backend&)> run, void* data, bool reduce,
                      std::span<const int64_t> header, std::exception_ptr transport);
  void drive_until(pending_op& p, std::unique_lock<std::mutex>& lk);
  void release_locked(std::unique_lock<std::mutex>& lk);
  std::exception_ptr ending_error(const collectives::negotiator::plan& plan);
  void execute(const collectives::round_result& r);
  void execute_one(pending_op& p);
  std::shared_ptr<pending_op> zeros_for(const collectives::operation& op);
  void execute_batch(std::span<const collectives::fusion_item> batch,
                     const std::vector<std::shared_ptr<pending_op>>& ops);
  collectives::backend& backend_for(const collectives::operation& op);
  void loop();
  std::chrono::milliseconds heartbeat() const;
  std::chrono::milliseconds idle_heartbeat() const;
  void heartbeat_round(std::unique_lock<std::mutex>& lk);
  static constexpr std::chrono::milliseconds idle_heartbeat_max{16000};
  std::chrono::steady_clock::time_point idle_round_due() const;
  bool run_closed() const;
  void apply_timeline_locked();
  // Autotune (engine_tuning.cpp): rank 0's values travel at the end of
  // every round's header while tuning, so every rank adopts them after
  // the same exchange.
  void start_tuning();
  size_t tuning_words() const noexcept;
  void append_tuning(std::vector<int64_t>& header) const;
  void adopt_tuning(std::vector<int64_t>& header, bool exchanged);
  void apply_tuning(const collectives::tuned_params& p);
  void observe_tuning(const collectives::operation& op, bool lane);
  bool has_work_locked() const {
    return !incoming_.empty() || outstanding_count_ > 0 || join_ != nullptr;
  }
  void complete(pending_op& p, std::exception_ptr error);
  // An async call's name, unique among the operations in flight here
  // (Horovod's tensor queue refuses a duplicate at the call).
  void hold_name(pending_op& p);
  void release_name(pending_op& p);

  std::unique_ptr<collectives::backend> backend_;
  // Declared after backend_: a host-staged device backend uses it.
  std::unique_ptr<collectives::backend> device_;
  collectives::topology topo_;
  engine_options opts_;
  collectives::fusion_planner planner_;
  collectives::fusion_executor fusion_;
  // The round driver's (whoever holds busy_).
  collectives::negotiator negotiator_;
  collectives::stall_inspector stall_;
  std::unordered_map<uint64_t, std::shared_ptr<pending_op>> outstanding_;
  // solo()'s results for its caller (the busy_ holder).
  std::exception_ptr solo_error_;
  /// The solo round's end (solo_run) and its header copy (solo), owned by
  /// the caller that holds busy_.
  std::chrono::steady_clock::time_point solo_ended_{};
  std::vector<int64_t> solo_header_;
  std::shared_ptr<pending_op> solo_pending_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Submitted, not yet handed to the negotiator.
  std::deque<std::shared_ptr<pending_op>> incoming_;
  size_t outstanding_count_ = 0;
  uint64_t next_id_ = 1;
  std::array<uint64_t, 8> noname_{};
  bool busy_ = false;
  bool stopping_ = false;
  // The last round readied or failed something.
  bool progress_ = true;
  bool submitted_since_round_ = false;
  std::chrono::steady_clock::time_point last_round_{};
  // Heartbeat rounds in a row that found this rank without work.
  int idle_rounds_ = 0;
  // When the last round began, and the first of the rounds in a row that
  // readied nothing (idle_round_due).
  std::chrono::steady_clock::time_point round_began_{};
  std::chrono::steady_clock::time_point stalled_since_{};
  // Waiters that want the next round now.
  int flush_ = 0;
  // hvd::join(): the call in progress (its promise), whether the
  // negotiator was told, and the rank that joined last.
  std::shared_ptr<pending_op> join_;
  bool join_told_ = false;
  int last_joined_ = -1;
  // Set once the ranks stopped negotiating (a rank shut down, a stall
  // shutdown, a failed transport): every later operation fails with it.
  std::exception_ptr ended_;
  // set_timeline()'s swap, waiting for whoever takes busy_ next.
  bool timeline_swap_ = false;
  collectives::timeline* next_timeline_ = nullptr;
  bool next_mark_cycles_ = false;
  // Autotune: rank 0's tuner; whether rounds carry its values; the values
  // in force.
  std::unique_ptr<collectives::parameter_manager> tuner_;
  bool tuning_ = false;
  collectives::tuned_params tuned_;
  uint64_t tune_exchanges_ = 0;
  std::vector<std::string> tune_history_; // under mu_
  // The names of this engine's async operations in flight (hold_name).
  std::mutex names_mu_;
  std::unordered_set<std::string> names_in_flight_;
  std::thread thread_;
};

} // namespace hvactor::hvd::detail
