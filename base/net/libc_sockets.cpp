// libc's socket calls behind the port guard's interposers
// (internal/libc_sockets.hpp).
#include "base/net/libc_sockets.hpp"

#include <dlfcn.h>

namespace hvactor::port_guard::libc {

namespace {

using accept_fn = int (*)(int, sockaddr*, socklen_t*);
using accept4_fn = int (*)(int, sockaddr*, socklen_t*, int);
using recv_fn = ssize_t (*)(int, void*, size_t, int);
using connect_fn = int (*)(int, const sockaddr*, socklen_t);
using close_fn = int (*)(int);

template <class F>
F real(F& cache, const char* name) {
  if (cache == nullptr)
    cache = reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
  return cache;
}

accept_fn real_accept_ = nullptr;
accept4_fn real_accept4_ = nullptr;
recv_fn real_recv_ = nullptr;
connect_fn real_connect_ = nullptr;
close_fn real_close_ = nullptr;

// Resolved at load time, before any thread or fork exists.
__attribute__((constructor)) void resolve_real_functions() {
  real(real_accept_, "accept");
  real(real_accept4_, "accept4");
  real(real_recv_, "recv");
  real(real_connect_, "connect");
  real(real_close_, "close");
}

} // namespace

int accept(int fd, sockaddr* addr, socklen_t* len) {
  return real(real_accept_, "accept")(fd, addr, len);
}

int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return real(real_accept4_, "accept4")(fd, addr, len, flags);
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  return real(real_recv_, "recv")(fd, buf, len, flags);
}

int connect(int fd, const sockaddr* addr, socklen_t len) {
  return real(real_connect_, "connect")(fd, addr, len);
}

int close(int fd) {
  return real(real_close_, "close")(fd);
}

} // namespace hvactor::port_guard::libc
