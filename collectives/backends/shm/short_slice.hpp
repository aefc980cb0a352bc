#pragma once

#include <cstdint>


namespace hvactor::collectives::shm {

/// While it lives, the calling thread asks the scheduler for slices of
/// knobs::shm_wake_slice (sched_setattr's sched_runtime for SCHED_OTHER,
/// Linux 6.12+; older kernels ignore it); its own attributes again after
/// (read each time: its nice value may have changed meanwhile). A woken
/// thread with a shorter slice may preempt the running one, so a rank
/// sleeping on a peer's word runs as soon as it is woken instead of after
/// a busy thread's slice. Only for SCHED_OTHER threads; where the kernel
/// refuses, the thread never asks again. No privilege needed.
class short_slice {
public:
  short_slice() noexcept;
  ~short_slice();
  short_slice(const short_slice&) = delete;
  short_slice& operator=(const short_slice&) = delete;

private:
  // sched_setattr(2)'s first version (the C library has no wrapper).
  struct kernel_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
  };

  static bool& refused() noexcept;

  kernel_sched_attr saved_{};
  bool set_ = false;
};

} // namespace hvactor::collectives::shm
