#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "internal/fusion_executor.hpp"
#include "internal/algorithm.hpp"
#include "internal/backend.hpp"
#include "internal/host_paths.hpp"
#include "internal/fusion_planner.hpp"
#include "hvactor/hvd.hpp"
#include "internal/name_check.hpp"
#include "internal/operation.hpp"
#include "internal/knobs.hpp"

namespace hvactor::collectives {
class timeline;
} // namespace hvactor::collectives

namespace hvactor::hvd::detail {

/// One queued operation. Fusible ones are async allreduces; every other
/// operation runs alone, in submission order.
struct pending_op {
  /// What runs; its name is the handle's name.
  collectives::operation op;
  bool fusible = false;
  /// Async allreduce: the tensor, reduced in place.
  void* data = nullptr;
  /// Any other operation: runs on the backend of op.device.
  std::function<void(collectives::backend&)> run;
  std::chrono::steady_clock::time_point submitted;
  std::promise<void> promise;
  std::shared_future<void> done = promise.get_future().share();
};

/// The engine's knobs, read once at hvd::init (hvd.cpp,
/// engine_options_from_env): nothing on the per-call path reads the
/// environment.
struct engine_options {
  /// HOROVOD_FUSION_THRESHOLD: bytes one fused batch may hold.
  size_t fusion_threshold = knobs::default_fusion_threshold;
  /// HOROVOD_CYCLE_TIME: how long a batch may wait for more tensors.
  std::chrono::microseconds cycle_time{knobs::default_cycle_time};
  /// Ranks compare the names and shapes of what they run (HVACTOR_CHECK_NAMES).
  bool check_names = false;
  /// The job's timeout; waits give up after twice that (the backend's own
  /// timeouts fire first).
  std::chrono::milliseconds timeout{30000};
  /// Records every operation's phases (HOROVOD_TIMELINE) when set; not
  /// owned, outlives the engine. Unset, each phase costs one null test.
  collectives::timeline* timeline = nullptr;
  /// Gloo's allreduce algorithm per message (HVACTOR_GLOO_ALLREDUCE):
  /// hvd::init hands it to the Gloo backend it creates.
  collectives::allreduce_algorithm_policy gloo_allreduce;
  /// Shared memory and the hierarchical path (HVACTOR_SHM,
  /// HOROVOD_HIERARCHICAL_ALLREDUCE/_ALLGATHER): for the host backend.
  collectives::path_settings paths;
};

/// Runs the process's collectives in submission order (Horovod's
/// background loop), each on the backend its descriptor names: the host
/// backend (Gloo), or the device backend for device memory. Consecutive
/// async allreduces are fused up to the threshold; a batch closes when the
/// cycle time since its first entry passed, when someone waits for one of
/// its entries, or when a non-fusible operation follows it. Ranks agree on
/// each batch's length with one small allreduce (the minimum of what each
/// rank has queued), so timing differences never split tensors differently.
/// Threading: any thread may call; operations run one at a time.
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
  std::shared_ptr<pending_op> submit(collectives::operation op, void* data);

  /// Installs the backend of device tensors (NCCL or host-staged); the host
  /// backend keeps negotiating every batch.
  void set_device_backend(std::unique_ptr<collectives::backend> b);

  /// The host backend (Gloo): the host-staged device path reduces there.
  collectives::backend& host_backend() noexcept {
    return *backend_;
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

  /// Finishes what is queued, then stops the thread.
  void stop();

private:
  template <class Body>
  void run_in_order(const collectives::operation& op, Body& body);
  template <class Body>
  std::exception_ptr execute_one(const collectives::operation& op, Body& body,
                                 std::chrono::steady_clock::time_point submitted);
  collectives::backend& backend_for(const collectives::operation& op);
  void loop();
  bool run_closed() const;
  void execute_batch(std::span<const collectives::fusion_item> batch,
                     const std::vector<std::shared_ptr<pending_op>>& ops);
  size_t negotiate(const std::vector<std::shared_ptr<pending_op>>& run, size_t local_count);
  size_t agree(const collectives::op_list& mine);
  size_t agree_on_shapes(const collectives::op_list& mine);
  void complete(pending_op& p, std::exception_ptr error);

  std::unique_ptr<collectives::backend> backend_;
  // Declared after backend_: a host-staged device backend uses it.
  std::unique_ptr<collectives::backend> device_;
  collectives::topology topo_;
  engine_options opts_;
  collectives::fusion_planner planner_;
  collectives::fusion_executor fusion_;
  collectives::name_check check_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<pending_op>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  // Waiters that want the current batch closed now.
  int flush_ = 0;
  std::thread thread_;
};

} // namespace hvactor::hvd::detail
