// The polling window of recv_spin.hpp.

#include "base/net/recv_spin.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "base/net/libc_sockets.hpp"

namespace hvactor::recv_spin {

namespace {

using clock = std::chrono::steady_clock;

thread_local const scope* current_ = nullptr;

bool nothing_yet(ssize_t n) {
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Waits for `fd` or the scope's wake-up descriptor until `deadline`;
// returns 1 when fd is readable, 0 on timeout, -1 with errno set.
int wait_readable(const scope& s, int fd, clock::time_point deadline) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {s.wake_fd, POLLIN, 0}};
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count();
    int rc = ::poll(fds, s.wake_fd >= 0 ? 2 : 1, static_cast<int>(std::max<long long>(left, 0)));
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc < 0)
      return -1;
    if (s.wake_fd >= 0 && fds[1].revents != 0) {
      errno = ECONNABORTED;
      return -1;
    }
    if (rc > 0)
      return 1;
    if (clock::now() >= deadline)
      return 0;
  }
}

} // namespace

scope::scope(std::chrono::microseconds window, int wake_fd, std::chrono::milliseconds timeout)
  : outer_(current_), window(window), wake_fd(wake_fd), timeout(timeout) {
  current_ = this;
}

scope::~scope() {
  current_ = outer_;
}

const scope* current() {
  return current_;
}

ssize_t recv(const scope& s, int fd, void* buf, size_t len, int flags) {
  namespace libc = port_guard::libc;
  if ((flags & MSG_DONTWAIT) != 0)
    return libc::recv(fd, buf, len, flags);
  auto start = clock::now();
  auto last = start;
  for (;;) {
    auto n = libc::recv(fd, buf, len, flags | MSG_DONTWAIT);
    if (!nothing_yet(n))
      return n;
    auto now = clock::now();
    if (now - start >= s.window || now - last >= preempted_gap)
      break;
    last = now;
    ::sched_yield();
  }
  auto deadline = start + s.timeout;
  for (;;) {
    int ready = wait_readable(s, fd, deadline);
    if (ready <= 0) {
      if (ready == 0)
        errno = EAGAIN;
      return -1;
    }
    auto n = libc::recv(fd, buf, len, flags | MSG_DONTWAIT);
    if (!nothing_yet(n))
      return n;
  }
}

} // namespace hvactor::recv_spin
