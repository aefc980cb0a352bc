#pragma once

// Internal: libc's own socket calls behind this library's interposers
// (port_guard.cpp defines accept, accept4, recv, connect and close, which
// symbol lookup finds before libc's). The guard forwards to these, and so
// does its own netlink socket (socket_owner.cpp), which must not pass
// through the checks. Resolved with dlsym(RTLD_NEXT) when the library is
// loaded, before any thread or fork exists (and on first use, should a
// constructor run earlier).

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>

namespace hvactor::port_guard::libc {

/// ::accept as libc defines it.
int accept(int fd, sockaddr* addr, socklen_t* len);
/// ::accept4 as libc defines it.
int accept4(int fd, sockaddr* addr, socklen_t* len, int flags);
/// ::recv as libc defines it.
ssize_t recv(int fd, void* buf, size_t len, int flags);
/// ::connect as libc defines it.
int connect(int fd, const sockaddr* addr, socklen_t len);
/// ::close as libc defines it.
int close(int fd);

} // namespace hvactor::port_guard::libc
