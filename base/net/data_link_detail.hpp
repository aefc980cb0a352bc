#pragma once

// Internal to data_link.cpp and data_link_server.cpp: what the client and
// the server share (OpenSSL contexts and reasons, timeouts, SIGPIPE).

#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "hvactor/errors.hpp"
#include "hvactor/tls.hpp"

namespace hvactor::data_link::detail {

inline constexpr size_t ticket_bytes = 16;
inline constexpr size_t file_piece = size_t{2} << 20;
// What a TLS connection reads at once, and gathers before a write.
inline constexpr int io_buffer = 256 << 10;

/// OpenSSL's queued reasons (cleared), or errno's text.
inline std::string ssl_reason(int saved_errno) {
  std::string out;
  while (auto code = ERR_get_error()) {
    std::array<char, 256> buf{};
    ERR_error_string_n(code, buf.data(), buf.size());
    out += (out.empty() ? "" : "; ") + std::string{buf.data()};
  }
  if (!out.empty())
    return out;
  if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK)
    return "timed out";
  return saved_errno != 0 ? std::strerror(saved_errno) : "the connection was closed";
}

[[noreturn]] inline void io_failed(const char* what, int saved_errno) {
  throw error(fmt::format("data link: {} failed: {}", what, ssl_reason(saved_errno)));
}

// A write to a socket whose peer is gone raises SIGPIPE, which would end
// the process: OpenSSL writes with write(), without MSG_NOSIGNAL. The
// signal is blocked in this thread around the write, and a pending one
// taken before it is unblocked.
class sigpipe_blocked {
public:
  sigpipe_blocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~sigpipe_blocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (!was_pending_) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;

private:
  sigset_t old_;
  bool was_pending_ = false;
};

inline int give_passphrase(char* buf, int size, int, void* user) {
  auto* text = static_cast<const std::string*>(user);
  int n = std::min<int>(size, static_cast<int>(text->size()));
  std::memcpy(buf, text->data(), static_cast<size_t>(n));
  return n;
}

// A context that presents this process's certificate and accepts only
// peers whose certificate the cluster CA issued.
inline SSL_CTX* make_context(const tls::config& cfg, bool as_server) {
  SSL_CTX* ctx = SSL_CTX_new(as_server ? TLS_server_method() : TLS_client_method());
  if (!ctx)
    throw error("data link: no TLS context: " + ssl_reason(0));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
  SSL_CTX_set_default_passwd_cb(ctx, give_passphrase);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, const_cast<std::string*>(&cfg.passphrase));
  bool ok = SSL_CTX_use_certificate_chain_file(ctx, cfg.certificate.c_str()) == 1
            && SSL_CTX_use_PrivateKey_file(ctx, cfg.key.c_str(), SSL_FILETYPE_PEM) == 1
            && SSL_CTX_check_private_key(ctx) == 1
            && SSL_CTX_load_verify_locations(ctx, cfg.cafile.c_str(), nullptr) == 1;
  SSL_CTX_set_default_passwd_cb_userdata(ctx, nullptr);
  if (!ok) {
    auto why = ssl_reason(0);
    SSL_CTX_free(ctx);
    throw std::invalid_argument(fmt::format("data link: the TLS identity {} does not load: {}",
                                            cfg.certificate, why));
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Records are 16 KiB at most: one read() per record would cost a system
  // call per 16 KiB. Read ahead as much as has arrived instead.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, io_buffer);
  return ctx;
}

inline void set_io_timeout(int fd, std::chrono::milliseconds t) {
  auto ms = std::max<int64_t>(1, t.count());
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

inline std::string to_hex(const unsigned char* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("{:02x}", p[i]);
  return out;
}

inline std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolve(const std::string& host, uint16_t port,
                                                           bool passive) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0 || !found)
    throw error(fmt::format("data link: cannot resolve {}: {}", host, ::gai_strerror(rc)));
  return {found, &freeaddrinfo};
}

} // namespace hvactor::data_link::detail
