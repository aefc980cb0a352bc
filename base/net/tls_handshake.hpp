#pragma once

// Internal: the TLS handshake pacer (tls_handshake.cpp), which keeps CAF
// 0.17.6's OpenSSL module from polling a socket for writing while its
// handshake waits for the peer (CAF issue #1060). It works by itself, from
// interposed SSL_connect/SSL_accept/SSL_free/epoll_ctl; these counters are
// for tests and logs.

#include <cstddef>
#include <cstdint>

#include <sys/types.h>

namespace hvactor::tls_handshake {

/// Handshake steps so far that left a socket waiting for its peer with its
/// write interest withheld.
uint64_t pauses();

/// Sockets whose handshake waits for the peer now.
size_t waiting();

/// Whether a handshake completed on socket `fd` (whose inode is `inode`)
/// and its SSL was not freed since: an authenticated peer.
bool completed(int fd, ino_t inode);

} // namespace hvactor::tls_handshake
