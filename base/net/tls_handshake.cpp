// Keeps CAF 0.17.6's OpenSSL module from spinning during a TLS handshake.
//
// Why: while SSL_connect or SSL_accept waits for the peer's next flight
// (SSL_ERROR_WANT_READ), CAF's session reports a write attempt as a
// successful write of 0 bytes, so a connection with queued bytes (the BASP
// server handshake is queued at accept, the client's at connect) stays
// registered for EPOLLOUT, epoll reports it writable at once, and the
// multiplexer thread calls SSL_connect again, at 100 % of a core, until the
// peer answers (docs/development/platform-notes.md, "CAF TLS: handshake
// busy loop"; CAF issue #1060, fixed upstream in 0.18.4 by dropping the
// write interest until the handshake is done).
// With tens of processes handshaking at once on a few cores, the spinning
// starved the very peers whose answers they waited for: at 24 emulated
// nodes most workers never registered.
//
// The same fix from outside CAF: these definitions interpose libssl's
// SSL_connect/SSL_accept/SSL_free and libc's epoll_ctl (symbol lookup finds
// this library first; openssl_error_queue.cpp does the same for the error
// queue). When a handshake step returns SSL_ERROR_WANT_READ, the socket's
// EPOLLOUT interest is taken out of the epoll set (and out of every later
// epoll_ctl for it) while the interest CAF asked for is remembered; when a
// step completes the handshake, fails, or wants to write, that interest is
// put back. The socket stays registered for EPOLLIN, so the peer's flight
// wakes the multiplexer, which calls SSL_connect/SSL_accept again through
// its read path. Sockets are identified by (fd, inode), so a reused fd
// number is never mistaken for a paused one.

#include <sys/epoll.h>
#include <sys/stat.h>

#include <dlfcn.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/net/loop_pacer.hpp"
#include "base/net/tls_handshake.hpp"

namespace {

using epoll_ctl_fn = int (*)(int, int, int, epoll_event*);
using handshake_fn = int (*)(SSL*);
using ssl_free_fn = void (*)(SSL*);

template <class F>
F real(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

epoll_ctl_fn real_epoll_ctl() {
  static auto fn = real<epoll_ctl_fn>("epoll_ctl");
  return fn;
}

ino_t inode_of(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/// What CAF registered for a TLS socket in one epoll set.
struct registration {
  epoll_event wanted{};
  bool out_withheld = false;
};

/// A socket that a handshake step ran on, until its SSL is freed.
struct tls_socket {
  ino_t inode = 0;
  const SSL* ssl = nullptr;
  bool waiting = false; // the handshake waits for the peer: EPOLLOUT withheld
  std::map<int, registration> registrations; // by epoll fd
};

/// A socket whose handshake completed (for the connection watchdog).
struct done_socket {
  const SSL* ssl = nullptr;
  ino_t inode = 0;
};

struct pacer_state {
  std::mutex mtx;
  std::map<int, tls_socket> sockets; // by fd
  std::map<int, done_socket> done;   // by fd, until its SSL is freed
  uint64_t pauses = 0;
  size_t waiting = 0;
};

pacer_state& state() {
  static auto* s = new pacer_state; // never destroyed: used until the last thread exits
  return *s;
}

void modify(int epfd, int fd, epoll_event ev, bool withhold_out) {
  if (withhold_out)
    ev.events &= ~static_cast<uint32_t>(EPOLLOUT);
  real_epoll_ctl()(epfd, EPOLL_CTL_MOD, fd, &ev);
}

/// Withholds the EPOLLOUT interest of `sock` (fd `fd`). Caller holds mtx.
void pause(pacer_state& s, tls_socket& sock, int fd) {
  if (sock.waiting)
    return;
  sock.waiting = true;
  ++s.pauses;
  ++s.waiting;
  for (auto& [epfd, reg] : sock.registrations) {
    if ((reg.wanted.events & EPOLLOUT) == 0)
      continue;
    modify(epfd, fd, reg.wanted, true);
    reg.out_withheld = true;
  }
}

/// Puts back the EPOLLOUT interest withheld from `sock`. Caller holds mtx.
void resume(pacer_state& s, tls_socket& sock, int fd) {
  if (!sock.waiting)
    return;
  sock.waiting = false;
  --s.waiting;
  for (auto& [epfd, reg] : sock.registrations) {
    if (!reg.out_withheld)
      continue;
    modify(epfd, fd, reg.wanted, false);
    reg.out_withheld = false;
  }
}

/// Forgets `fd` (its SSL was freed, or the number now names another file).
void forget(pacer_state& s, int fd) {
  auto i = s.sockets.find(fd);
  if (i == s.sockets.end())
    return;
  if (i->second.waiting)
    --s.waiting;
  s.sockets.erase(i);
}

/// One handshake step, then pause or resume its socket by the outcome.
int paced_step(handshake_fn step, SSL* ssl) {
  ERR_clear_error(); // openssl_error_queue.cpp: SSL_get_error needs an empty queue
  int ret = step(ssl);
  int fd = SSL_get_fd(ssl);
  if (fd < 0)
    return ret;
  bool wants_read = ret != 1 && SSL_get_error(ssl, ret) == SSL_ERROR_WANT_READ;
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  if (ret == 1)
    s.done[fd] = done_socket{ssl, inode_of(fd)};
  auto i = s.sockets.find(fd);
  if (i != s.sockets.end() && i->second.ssl != ssl) {
    forget(s, fd); // a new connection on a reused fd number
    i = s.sockets.end();
  }
  if (i == s.sockets.end()) {
    if (!wants_read)
      return ret;
    i = s.sockets.emplace(fd, tls_socket{inode_of(fd), ssl, false, {}}).first;
  }
  if (wants_read)
    pause(s, i->second, fd);
  else
    resume(s, i->second, fd);
  return ret;
}

/// EPOLL_CTL_DEL of `fd` from `epfd` happened: forget what CAF had asked.
void forget_registration(int epfd, int fd) {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto i = s.sockets.find(fd);
  if (i != s.sockets.end())
    i->second.registrations.erase(epfd);
}

} // namespace

namespace hvactor::tls_handshake {

uint64_t pauses() {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  return s.pauses;
}

size_t waiting() {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  return s.waiting;
}

bool completed(int fd, ino_t inode) {
  auto& s = state();
  std::lock_guard<std::mutex> guard{s.mtx};
  auto d = s.done.find(fd);
  return d != s.done.end() && d->second.inode == inode;
}

} // namespace hvactor::tls_handshake

extern "C" {

int SSL_connect(SSL* ssl) {
  static auto fn = real<handshake_fn>("SSL_connect");
  return paced_step(fn, ssl);
}

int SSL_accept(SSL* ssl) {
  static auto fn = real<handshake_fn>("SSL_accept");
  return paced_step(fn, ssl);
}

void SSL_free(SSL* ssl) {
  static auto fn = real<ssl_free_fn>("SSL_free");
  if (ssl != nullptr) {
    int fd = SSL_get_fd(ssl);
    auto& s = state();
    std::lock_guard<std::mutex> guard{s.mtx};
    auto i = fd < 0 ? s.sockets.end() : s.sockets.find(fd);
    if (i != s.sockets.end() && i->second.ssl == ssl) {
      resume(s, i->second, fd);
      forget(s, fd);
    }
    if (auto d = s.done.find(fd); d != s.done.end() && d->second.ssl == ssl)
      s.done.erase(d);
  }
  fn(ssl);
}

int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  auto fn = real_epoll_ctl();
  if (op == EPOLL_CTL_DEL) {
    int rc = fn(epfd, op, fd, event);
    int saved = errno;
    hvactor::loop_pacer::on_epoll_del(epfd); // wakes a paced Gloo loop
    forget_registration(epfd, fd);
    errno = saved;
    return rc;
  }
  auto& s = state();
  std::unique_lock<std::mutex> guard{s.mtx};
  auto i = s.sockets.find(fd);
  if (i != s.sockets.end() && i->second.waiting && i->second.inode != inode_of(fd)) {
    forget(s, fd); // closed without SSL_free, and the number reused
    i = s.sockets.end();
  }
  if (i == s.sockets.end()) {
    guard.unlock();
    return fn(epfd, op, fd, event);
  }
  auto& sock = i->second;
  if (event == nullptr)
    return fn(epfd, op, fd, event);
  auto& reg = sock.registrations[epfd];
  reg.wanted = *event;
  reg.out_withheld = sock.waiting && (event->events & EPOLLOUT) != 0;
  auto ev = *event;
  if (reg.out_withheld)
    ev.events &= ~static_cast<uint32_t>(EPOLLOUT);
  return fn(epfd, op, fd, &ev);
}

} // extern "C"
