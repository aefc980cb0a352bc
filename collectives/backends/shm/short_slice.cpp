#include "collectives/backends/shm/short_slice.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "base/internal/knobs_collectives.hpp"

namespace hvactor::collectives::shm {

namespace {

constexpr uint64_t sched_flag_reset_on_fork = 0x01;

} // namespace

short_slice::short_slice() noexcept {
  if (refused())
    return;
  saved_.size = sizeof(kernel_sched_attr);
  if (::syscall(SYS_sched_getattr, 0, &saved_, sizeof(kernel_sched_attr), 0) != 0) {
    refused() = true;
    return;
  }
  if (saved_.sched_policy != SCHED_OTHER)
    return;
  saved_.size = sizeof(kernel_sched_attr);
  saved_.sched_flags &= sched_flag_reset_on_fork;
  auto attr = saved_;
  attr.sched_runtime =
    static_cast<uint64_t>(std::chrono::nanoseconds{knobs::shm_wake_slice}.count());
  set_ = ::syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
  refused() = !set_;
}

short_slice::~short_slice() {
  if (set_)
    ::syscall(SYS_sched_setattr, 0, &saved_, 0);
}

bool& short_slice::refused() noexcept {
  thread_local bool no = false;
  return no;
}

} // namespace hvactor::collectives::shm
