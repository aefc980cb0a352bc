// The bulk data connection (data_link.hpp): one side's stream, and the
// client's connect. The server is data_link_server.cpp's.

#include "base/net/data_link.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "hvactor/errors.hpp"
#include "base/internal/bulk_bytes.hpp"
#include "base/net/data_link_detail.hpp"

namespace hvactor::data_link {

using namespace detail;

stream::~stream() {
  if (ssl_)
    SSL_free(ssl_);
  if (fd_ >= 0)
    ::close(fd_);
}

void stream::write(const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  if (ssl_) {
    sigpipe_blocked guard;
    while (n > 0) {
      size_t done = 0;
      errno = 0;
      if (SSL_write_ex(ssl_, p, n, &done) != 1)
        throw error("data link: sending failed: " + ssl_reason(errno));
      p += done;
      n -= done;
    }
    return;
  }
  while (n > 0) {
    auto sent = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR)
      continue;
    if (sent <= 0)
      io_failed("sending", errno);
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

void stream::read(void* data, size_t n) {
  flush();
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    if (ssl_) {
      size_t got = 0;
      errno = 0;
      if (SSL_read_ex(ssl_, p, n, &got) != 1)
        throw error("data link: receiving failed: " + ssl_reason(errno));
      p += got;
      n -= got;
      continue;
    }
    auto got = ::recv(fd_, p, n, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      io_failed("receiving", got == 0 ? 0 : errno);
    p += got;
    n -= static_cast<size_t>(got);
  }
}

void stream::send_file(int fd, uint64_t offset, uint64_t n) {
  if (!ssl_) {
    auto at = static_cast<off_t>(offset);
    while (n > 0) {
      auto sent = ::sendfile(fd_, fd, &at, static_cast<size_t>(std::min<uint64_t>(n, 1u << 30)));
      if (sent < 0 && errno == EINTR)
        continue;
      if (sent == 0)
        throw error("data link: the file ended before the bytes announced");
      if (sent < 0)
        io_failed("sending a file", errno);
      n -= static_cast<uint64_t>(sent);
    }
    return;
  }
  bulk_bytes buf(static_cast<size_t>(std::min<uint64_t>(n, file_piece)));
  while (n > 0) {
    auto want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    auto got = ::pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      throw error(fmt::format("data link: reading the file to send failed: {}",
                              got == 0 ? "it ended early" : std::strerror(errno)));
    write(buf.data(), static_cast<size_t>(got));
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

void stream::write_u64(uint64_t v) {
  std::array<unsigned char, 8> b{};
  for (size_t i = 0; i < 8; ++i)
    b[i] = static_cast<unsigned char>(v >> (8 * i));
  write(b.data(), b.size());
}

uint64_t stream::read_u64() {
  std::array<unsigned char, 8> b{};
  read(b.data(), b.size());
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i)
    v |= uint64_t{b[i]} << (8 * i);
  return v;
}

void stream::write_frame(const void* data, size_t n) {
  write_u64(n);
  write(data, n);
}

size_t stream::read_frame_length(size_t max) {
  auto n = read_u64();
  if (n > max)
    throw error(fmt::format("data link: the peer announced {} bytes where at most {} may come",
                            n, max));
  return static_cast<size_t>(n);
}

void stream::attach(SSL* ssl) {
  ssl_ = ssl;
  SSL_set_fd(ssl_, fd_);
  // Records gather in a buffer and leave in one write() each 256 KiB.
  BIO* socket = SSL_get_wbio(ssl_);
  BIO* gather = BIO_new(BIO_f_buffer());
  if (!gather || BIO_up_ref(socket) != 1)
    throw error("data link: no TLS write buffer: " + ssl_reason(0));
  BIO_set_write_buffer_size(gather, io_buffer);
  BIO_push(gather, socket);
  SSL_set0_wbio(ssl_, gather);
}

void stream::flush() {
  if (!ssl_)
    return;
  sigpipe_blocked guard;
  errno = 0;
  if (BIO_flush(SSL_get_wbio(ssl_)) != 1)
    throw error("data link: sending failed: " + ssl_reason(errno));
}

void stream::finish() {
  if (ssl_) {
    flush();
    sigpipe_blocked guard;
    SSL_shutdown(ssl_);
    BIO_flush(SSL_get_wbio(ssl_));
  }
  ::shutdown(fd_, SHUT_WR);
}

void stream::handshake(bool as_server) {
  sigpipe_blocked guard;
  errno = 0;
  int rc = as_server ? SSL_accept(ssl_) : SSL_connect(ssl_);
  if (rc != 1)
    throw error("data link: the TLS handshake failed: " + ssl_reason(errno));
}

// ---- client ----------------------------------------------------------------

std::unique_ptr<stream> connect(const std::string& host, uint16_t port, const tls::config& tls,
                                const ticket& t, std::chrono::milliseconds io_timeout) {
  auto where = resolve(host, port, false);
  int fd = ::socket(where->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    io_failed("opening a socket", errno);
  auto s = std::make_unique<stream>(fd, nullptr);
  int rc = ::connect(fd, where->ai_addr, where->ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS)
    throw error(fmt::format("data link: cannot connect to {}:{}: {}", host, port,
                            std::strerror(errno)));
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (rc != 0 && ::poll(&p, 1, static_cast<int>(io_timeout.count())) != 1)
    throw error(fmt::format("data link: cannot connect to {}:{} within {} ms", host, port,
                            io_timeout.count()));
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    throw error(fmt::format("data link: cannot connect to {}:{}: {}", host, port,
                            std::strerror(err)));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_io_timeout(fd, io_timeout);
  if (tls.enabled()) {
    SSL_CTX* ctx = make_context(tls, false);
    SSL* ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); // the SSL keeps its own reference
    if (!ssl)
      throw error("data link: no TLS session: " + ssl_reason(0));
    s->attach(ssl);
    s->handshake(false);
  }
  std::array<unsigned char, ticket_bytes> raw{};
  if (t.size() != 2 * ticket_bytes)
    throw error("data link: a malformed ticket");
  for (size_t i = 0; i < ticket_bytes; ++i)
    raw[i] = static_cast<unsigned char>(std::stoi(t.substr(2 * i, 2), nullptr, 16));
  s->write(raw.data(), raw.size());
  // Now, not with the first bytes: the server checks the ticket and gets
  // its side ready while this side reads what it sends.
  s->flush();
  return s;
}

} // namespace hvactor::data_link
