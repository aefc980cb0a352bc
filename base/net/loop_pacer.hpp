#pragma once

// Internal: the Gloo loop pacer (loop_pacer.cpp), which lets Gloo's TCP
// event loop sleep while idle instead of waking every 10 ms. It works by
// itself, from the interposed epoll_wait and pthread_join; epoll_ctl
// (tls_handshake.cpp) and close (port_guard.cpp) call the hooks below.

#include <chrono>
#include <cstddef>

#include <pthread.h>

namespace hvactor::loop_pacer {

/// How long an idle Gloo loop sleeps (Gloo: 10 ms). Every wait Gloo has on
/// its loop is woken by us (a socket's removal, the join of its thread), so
/// this bounds only one we would not know of. At 250 ms an idle worker's
/// loop woke 4 times a second (20-30 us each): 128 ranks, 1.3 % of a core.
inline constexpr auto idle_wait = std::chrono::milliseconds{5000};

/// After a socket leaves a loop, the loop ticks every 10 ms for this long:
/// the unregistering thread and the device's destructor wait for a tick.
inline constexpr auto busy_window = std::chrono::milliseconds{1000};

/// Gloo's loop is back in epoll_wait within this time of a return with
/// events: it skipped them (a read of one takes longer), their pair's lock
/// being held by another thread.
inline constexpr auto spin_gap = std::chrono::microseconds{3};

/// Spinning loops yield the core this many times in a row, then sleep
/// spin_sleep before each further wait until they handle an event.
inline constexpr int spin_yields = 8;
inline constexpr auto spin_sleep = std::chrono::microseconds{20};

/// A socket left epoll set `epfd` (EPOLL_CTL_DEL): wake its loop if it is
/// Gloo's, and keep it ticking for busy_window.
void on_epoll_del(int epfd);

/// `fd` is being closed: forget it if it was a Gloo loop's epoll set.
void on_close(int fd);

/// `thread` is being joined: wake it if it runs a Gloo loop (its Loop's
/// destructor, which set the loop's done_ flag first).
void on_join(pthread_t thread);

/// Gloo loops paced now (for tests).
size_t paced_loops();

} // namespace hvactor::loop_pacer
