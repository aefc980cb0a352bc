// Keeps Gloo's TCP event loop from waking 100 times a second while idle.
//
// Why: Gloo's loop thread (gloo/transport/tcp/loop.cc, the Debian build)
// calls epoll_wait with a 10 ms timeout, only to look at its `done_` flag
// and to wake threads that wait for a "tick" (unregistering a socket waits
// for one). An idle rank's Gloo thread so used 3 ms of CPU a second, most
// of what an idle worker burned: 128 idle ranks, 40 % of a core.
//
// This library interposes epoll_wait (symbol lookup finds it before
// libc's). A wait of exactly 10 ms called from libgloo gets a long timeout
// (loop_pacer::idle_wait) instead, and the set gets an eventfd of ours
// (its events are never handed to Gloo). Every EPOLL_CTL_DEL on the set
// (tls_handshake.cpp's epoll_ctl calls on_epoll_del) writes that eventfd,
// and the loop then ticks every 10 ms again for loop_pacer::busy_window: the
// thread that unregisters, and the Loop's destructor that joins the thread
// right after the last socket went, see their tick as before. pthread_join
// is interposed too: joining a paced loop's thread (the Loop's destructor,
// at any time) writes its eventfd, so nothing waits out an idle wait.
// Sockets with traffic wake the loop as they always did.
//
// It also keeps the loop from spinning while another thread holds a pair's
// lock. Gloo's Pair::handleEvents only try-locks the pair and skips the
// event when another thread holds it (a send or a receive being posted);
// the socket stays readable, so the loop's next epoll_wait returns at once
// and the loop spins until that thread lets go. When that thread was
// preempted on the same core (one core per rank, a loaded machine), it let
// go only at the scheduler's next tick: 2 emulated nodes with one core each
// saw 1.4 million epoll_wait calls a second and 4 B allreduces of 4 or 8 ms
// (one or two 4 ms ticks) instead of 0.1 ms. An epoll_wait that comes right
// back with Gloo's events unhandled yields the core to that thread first,
// and sleeps a little if that does not end it.

#include "base/net/loop_pacer.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "base/net/libc_sockets.hpp"

namespace {

using epoll_wait_fn = int (*)(int, epoll_event*, int, int);
using pthread_join_fn = int (*)(pthread_t, void**);
using clock = std::chrono::steady_clock;

constexpr uint64_t marker = 0x6876616374726c70; // "hvactrlp"
constexpr int gloo_timeout_ms = 10;

epoll_wait_fn real_epoll_wait() {
  static auto fn = reinterpret_cast<epoll_wait_fn>(::dlsym(RTLD_NEXT, "epoll_wait"));
  return fn;
}

pthread_join_fn real_pthread_join() {
  static auto fn = reinterpret_cast<pthread_join_fn>(::dlsym(RTLD_NEXT, "pthread_join"));
  return fn;
}

struct paced_set {
  int wake_fd = -1;
  clock::time_point busy_until{};
  pthread_t thread{}; // the loop's thread, which waits on the set
};

struct pacer_state {
  std::atomic<size_t> entries{0}; // sets + not_gloo: close() skips the lock at 0
  std::mutex mtx;
  std::map<int, paced_set> sets;   // by epoll fd: Gloo's loops
  std::map<int, bool> not_gloo;    // epoll fds seen with 10 ms from elsewhere
};

pacer_state& state() {
  static auto* s = new pacer_state; // never destroyed: used until the last thread exits
  return *s;
}

bool called_from_gloo(const void* caller) {
  Dl_info info{};
  return ::dladdr(caller, &info) != 0 && info.dli_fname != nullptr
         && std::strstr(info.dli_fname, "libgloo") != nullptr;
}

/// The timeout for this wait of Gloo's loop on `epfd`, setting the set up
/// on first sight. Caller holds mtx.
int paced_timeout(pacer_state& s, int epfd, const void* caller) {
  auto i = s.sets.find(epfd);
  if (i == s.sets.end()) {
    if (s.not_gloo.count(epfd) != 0)
      return gloo_timeout_ms;
    if (!called_from_gloo(caller)) {
      s.not_gloo[epfd] = true;
      s.entries = s.sets.size() + s.not_gloo.size();
      return gloo_timeout_ms;
    }
    int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
      return gloo_timeout_ms;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = marker;
    if (::epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) != 0) {
      hvactor::port_guard::libc::close(efd);
      return gloo_timeout_ms;
    }
    // Gloo's loop thread inherits its creator's name ("caf.actor" in a
    // worker), which hid its CPU among the actors' in per-thread tables.
    ::pthread_setname_np(::pthread_self(), "gloo.loop");
    i = s.sets.emplace(epfd, paced_set{efd, {}, ::pthread_self()}).first;
    s.entries = s.sets.size() + s.not_gloo.size();
  }
  if (clock::now() < i->second.busy_until)
    return gloo_timeout_ms;
  return static_cast<int>(hvactor::loop_pacer::idle_wait.count());
}

/// Drops our eventfd's events from `events`, draining it; returns the count left.
int strip_wakeups(int epfd, epoll_event* events, int n) {
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 != marker) {
      events[kept++] = events[i];
      continue;
    }
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mtx};
    auto set = s.sets.find(epfd);
    uint64_t count = 0;
    if (set != s.sets.end()) {
      [[maybe_unused]] auto r = ::read(set->second.wake_fd, &count, sizeof count);
    }
  }
  return kept;
}

/// A Gloo loop thread's last return from epoll_wait, to tell a spin (the
/// events skipped: back within spin_gap) from events handled (a read takes
/// a system call or more).
struct spin_watch {
  clock::time_point returned{};
  bool had_events = false;
  int spins = 0;
};

thread_local spin_watch watch;

/// Back from events it could not handle (their pair's lock was held): let
/// the holder run. sched_yield() first; a holder that does not get the core
/// that way (another scheduler policy, a busier core) gets a short sleep.
void yield_if_spinning() {
  if (!watch.had_events)
    return;
  if (clock::now() - watch.returned > hvactor::loop_pacer::spin_gap) {
    watch.spins = 0;
    return;
  }
  if (++watch.spins <= hvactor::loop_pacer::spin_yields) {
    ::sched_yield();
    return;
  }
  timespec pause{0, std::chrono::nanoseconds{hvactor::loop_pacer::spin_sleep}.count()};
  ::nanosleep(&pause, nullptr);
}

} // namespace

namespace hvactor::loop_pacer {

void on_epoll_del(int epfd) {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto i = s.sets.find(epfd);
  if (i == s.sets.end())
    return;
  i->second.busy_until = clock::now() + busy_window;
  uint64_t one = 1;
  [[maybe_unused]] auto r = ::write(i->second.wake_fd, &one, sizeof one);
}

void on_close(int fd) {
  auto& s = state();
  if (s.entries.load() == 0)
    return;
  std::lock_guard<std::mutex> guard{s.mtx};
  s.not_gloo.erase(fd);
  auto i = s.sets.find(fd);
  if (i != s.sets.end()) {
    port_guard::libc::close(i->second.wake_fd);
    s.sets.erase(i);
  }
  s.entries = s.sets.size() + s.not_gloo.size();
}

void on_join(pthread_t thread) {
  auto& s = state();
  if (s.entries.load() == 0)
    return;
  std::lock_guard<std::mutex> guard{s.mtx};
  for (auto& [epfd, set] : s.sets) {
    if (::pthread_equal(set.thread, thread) == 0)
      continue;
    set.busy_until = clock::now() + busy_window;
    uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(set.wake_fd, &one, sizeof one);
  }
}

size_t paced_loops() {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  return s.sets.size();
}

} // namespace hvactor::loop_pacer

extern "C" int epoll_wait(int epfd, epoll_event* events, int maxevents, int timeout) {
  auto fn = real_epoll_wait();
  if (timeout != gloo_timeout_ms)
    return fn(epfd, events, maxevents, timeout);
  {
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mtx};
    timeout = paced_timeout(s, epfd, __builtin_return_address(0));
  }
  yield_if_spinning();
  int n = fn(epfd, events, maxevents, timeout);
  if (n > 0)
    n = strip_wakeups(epfd, events, n);
  watch.had_events = n > 0;
  watch.returned = clock::now();
  return n;
}

// Gloo's Loop destructor sets its done_ flag and joins the loop's thread,
// which sees the flag only when its epoll_wait returns: wake it here, or
// the destructor waits out an idle wait.
extern "C" int pthread_join(pthread_t thread, void** result) {
  hvactor::loop_pacer::on_join(thread);
  return real_pthread_join()(thread, result);
}
