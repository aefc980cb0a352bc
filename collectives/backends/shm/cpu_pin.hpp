#pragma once

#include <sched.h>

namespace hvactor::collectives::shm {

/// While it lives, the calling thread runs on one CPU only; the affinity
/// it had before (`saved`) again after. For a rank's sleeping wait
/// (communicator::sleep_apart): a sleeping thread creates no threads, so
/// none inherits the single CPU.
class cpu_pin {
public:
  cpu_pin(const cpu_set_t& saved, int cpu) noexcept : saved_{saved} {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    set_ = ::sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  ~cpu_pin() {
    if (set_)
      ::sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  cpu_pin(const cpu_pin&) = delete;
  cpu_pin& operator=(const cpu_pin&) = delete;

private:
  cpu_set_t saved_;
  bool set_ = false;
};

} // namespace hvactor::collectives::shm
