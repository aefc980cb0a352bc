#pragma once

// Internal: the Gloo loop pacer (loop_pacer.cpp), which lets Gloo's TCP
// event loop sleep while idle instead of waking every 10 ms. It works by
// itself, from the interposed epoll_wait; epoll_ctl (tls_handshake.cpp) and
// close (port_guard.cpp) call the hooks below.

#include <chrono>
#include <cstddef>

namespace hvactor::loop_pacer {

/// How long an idle Gloo loop sleeps (Gloo: 10 ms). Its only cost: a Gloo
/// device destroyed long after its last socket waits up to this for its
/// thread.
inline constexpr auto idle_wait = std::chrono::milliseconds{250};

/// After a socket leaves a loop, the loop ticks every 10 ms for this long:
/// the unregistering thread and the device's destructor wait for a tick.
inline constexpr auto busy_window = std::chrono::milliseconds{1000};

/// A socket left epoll set `epfd` (EPOLL_CTL_DEL): wake its loop if it is
/// Gloo's, and keep it ticking for busy_window.
void on_epoll_del(int epfd);

/// `fd` is being closed: forget it if it was a Gloo loop's epoll set.
void on_close(int fd);

/// Gloo loops paced now (for tests).
size_t paced_loops();

} // namespace hvactor::loop_pacer
