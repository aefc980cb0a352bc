#pragma once

// Internal: a bounded polling window for the blocking reads of one thread.
// The small-message lane (collectives/backends/gloo/small_lane.hpp) reads its
// replies with Gloo pairs in sync mode: Gloo's own thread calls a blocking
// recv(), which costs a sleep and a wake-up (about 8 us per message
// across two emulated nodes), and Gloo's busy-poll mode spins until the
// message comes or the job's timeout passes. While a scope is alive on a
// thread, the interposed recv (port_guard.cpp) polls without blocking for
// at most a window first, then waits in poll() for the socket or for a
// wake-up descriptor, so that a read is fast when the peer answers at
// once, costs no core when it does not, and can be stopped by another
// thread.

#include <sys/types.h>

#include <chrono>
#include <cstddef>

namespace hvactor::recv_spin {

/// A gap this long between two polls of the window means the thread was
/// preempted: the core is shared, and the rest of the wait sleeps.
inline constexpr auto preempted_gap = std::chrono::microseconds{30};

/// While alive, this thread's blocking recv() calls poll for `window`
/// (yielding the core between polls), then wait for the socket or for
/// `wake_fd` (-1: none) to become readable, for at most `timeout`. A
/// readable `wake_fd` makes the recv fail with ECONNABORTED; the timeout
/// makes it fail with EAGAIN (as a receive timeout does). Scopes nest:
/// the inner one wins until it ends.
class scope {
public:
  scope(std::chrono::microseconds window, int wake_fd, std::chrono::milliseconds timeout);
  ~scope();
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;

private:
  const scope* outer_;

public:
  const std::chrono::microseconds window;
  const int wake_fd;
  const std::chrono::milliseconds timeout;
};

/// The scope alive on this thread, or nullptr.
const scope* current();

/// recv() under `s` (called by the interposer; `recv` reads with libc's).
ssize_t recv(const scope& s, int fd, void* buf, size_t len, int flags);

} // namespace hvactor::recv_spin
