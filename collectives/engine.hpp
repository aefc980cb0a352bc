#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hvactor/collectives/algorithm.hpp"
#include "hvactor/collectives/backend.hpp"
#include "hvactor/collectives/fusion_planner.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::collectives {
class timeline;
} // namespace hvactor::collectives

namespace hvactor::hvd::detail {

/// One queued operation. Fusible ones are async allreduces; every other
/// operation runs alone, in submission order.
struct pending_op {
  std::string name;
  bool fusible = false;
  // Async allreduce.
  void* data = nullptr;
  size_t count = 0;
  dtype type = dtype::float32;
  op reduction = op::sum;
  /// Device memory: reduced by the device backend.
  bool device = false;
  // Any other operation.
  std::function<void(collectives::backend&)> run;
  std::chrono::steady_clock::time_point submitted;
  std::promise<void> promise;
  std::shared_future<void> done = promise.get_future().share();
};

struct engine_options {
  size_t fusion_threshold = size_t{128} << 20;
  std::chrono::microseconds cycle_time{1000};
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
};

/// Runs the process's collectives on one background thread, in submission
/// order (Horovod's background loop). Consecutive async allreduces are fused
/// up to the threshold; a batch closes when the cycle time since its first
/// entry passed, when someone waits for one of its entries, or when a
/// non-fusible operation follows it. Ranks agree on each batch's length
/// with one small allreduce (the minimum of what each rank has queued), so
/// timing differences between ranks never split tensors differently.
class engine {
public:
  engine(std::unique_ptr<collectives::backend> b, const collectives::topology& topo,
         engine_options opts);
  ~engine();

  /// Runs `fn` as the next operation and waits for it. Runs on the calling
  /// thread when nothing is queued (no hand-off), else on the engine's.
  void run(std::string name, const std::function<void(collectives::backend&)>& fn);

  /// Queues an in-place allreduce (of device memory when `device`).
  std::shared_ptr<pending_op> submit(void* data, size_t count, dtype t, op o, std::string name,
                                     bool device = false);

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
  void loop();
  bool run_closed() const;
  std::exception_ptr execute_one(const std::string& name,
                                 const std::function<void(collectives::backend&)>& fn,
                                 std::chrono::steady_clock::time_point submitted);
  void execute_batch(std::vector<std::shared_ptr<pending_op>>& batch);
  void reduce_group(std::vector<std::shared_ptr<pending_op>>& batch, size_t begin, size_t end);
  size_t negotiate(const std::vector<std::shared_ptr<pending_op>>& run, size_t local_count);
  size_t agree(const std::vector<std::string>& descriptors, bool batch);
  void complete(pending_op& p, std::exception_ptr error);

  std::unique_ptr<collectives::backend> backend_;
  // Declared after backend_: a host-staged device backend uses it.
  std::unique_ptr<collectives::backend> device_;
  collectives::topology topo_;
  engine_options opts_;
  collectives::fusion_planner planner_;
  std::vector<char> fusion_buffer_;
  uint64_t checked_ops_ = 0;

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
