// The bulk data connection (data_link.hpp): a TCP socket per transfer,
// mutual TLS with the cluster CA or, without TLS, loopback peers of this
// user only, and a one-time ticket before any byte of the transfer.

#include "base/net/data_link.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "base/net/port_guard.hpp"

namespace hvactor::data_link {

namespace {

constexpr size_t ticket_bytes = 16;
constexpr size_t file_piece = size_t{1} << 20;
// What a TLS connection reads at once, and gathers before a write.
constexpr int io_buffer = 256 << 10;

/// OpenSSL's queued reasons (cleared), or errno's text.
std::string ssl_reason(int saved_errno) {
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

[[noreturn]] void io_failed(const char* what, int saved_errno) {
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

int give_passphrase(char* buf, int size, int, void* user) {
  auto* text = static_cast<const std::string*>(user);
  int n = std::min<int>(size, static_cast<int>(text->size()));
  std::memcpy(buf, text->data(), static_cast<size_t>(n));
  return n;
}

// A context that presents this process's certificate and accepts only
// peers whose certificate the cluster CA issued.
SSL_CTX* make_context(const tls::config& cfg, bool as_server) {
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

void set_io_timeout(int fd, std::chrono::milliseconds t) {
  auto ms = std::max<int64_t>(1, t.count());
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::string to_hex(const unsigned char* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("{:02x}", p[i]);
  return out;
}

std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolve(const std::string& host, uint16_t port,
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

} // namespace

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
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(n, file_piece)));
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

void stream::read_frame(std::vector<char>& out, size_t max) {
  auto n = read_u64();
  if (n > max)
    throw error(fmt::format("data link: the peer announced {} bytes where at most {} may come",
                            n, max));
  out.resize(static_cast<size_t>(n));
  read(out.data(), out.size());
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

// ---- server ----------------------------------------------------------------

server::server(options opts) : opts_(std::move(opts)) {
  if (opts_.tls.enabled())
    ctx_ = make_context(opts_.tls, true);
  auto where = resolve(opts_.host, 0, true);
  listen_fd_ = ::socket(where->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (listen_fd_ >= 0)
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (listen_fd_ < 0 || ::bind(listen_fd_, where->ai_addr, where->ai_addrlen) != 0
      || ::listen(listen_fd_, 128) != 0
      || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    int saved = errno;
    if (listen_fd_ >= 0)
      ::close(listen_fd_);
    if (ctx_)
      SSL_CTX_free(ctx_);
    throw error(fmt::format("data link: cannot listen on {}: {}", opts_.host,
                            std::strerror(saved)));
  }
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  acceptor_ = std::thread{[this] { accept_loop(); }};
}

server::~server() {
  stopping_ = true;
  uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0)
    log::warn("data link: cannot wake the acceptor: {}", std::strerror(errno));
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk{mu_};
    for (auto& [id, c] : connections_) {
      if (c.fd >= 0)
        ::shutdown(c.fd, SHUT_RDWR);
      threads.push_back(std::move(c.thread));
    }
    tickets_.clear();
  }
  for (auto& t : threads)
    t.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  if (ctx_)
    SSL_CTX_free(ctx_);
}

ticket server::offer(job j, std::chrono::milliseconds valid_for) {
  std::array<unsigned char, ticket_bytes> raw{};
  if (RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1)
    throw error("data link: no random bytes for a ticket: " + ssl_reason(0));
  auto t = to_hex(raw.data(), raw.size());
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk{mu_};
  std::erase_if(tickets_, [&](auto& kv) { return kv.second.until < now; });
  tickets_[t] = offered{std::move(j), now + valid_for};
  return t;
}

void server::reap_finished() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lk{mu_};
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->second.finished) {
        done.push_back(std::move(it->second.thread));
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& t : done)
    t.join();
}

void server::accept_loop() {
  while (!stopping_) {
    std::array<pollfd, 2> fds{pollfd{listen_fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    ::poll(fds.data(), fds.size(), 1000);
    reap_finished();
    if (stopping_ || !(fds[0].revents & POLLIN))
      continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    std::lock_guard<std::mutex> lk{mu_};
    if (connections_.size() >= opts_.max_connections) {
      ::close(fd);
      ++refused_;
      continue;
    }
    auto id = next_connection_++;
    auto& c = connections_[id];
    c.fd = fd;
    c.thread = std::thread{[this, fd, id] { serve(fd, id); }};
  }
}

// The peer's credentials: its user on loopback (plain), or its
// certificate (TLS).
void server::authenticate(stream& s, int fd) {
  set_io_timeout(fd, opts_.io_timeout);
  if (!ctx_ && port_guard::current().same_user) {
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
    auto* p = reinterpret_cast<sockaddr*>(&peer);
    if (!port_guard::is_loopback(p))
      throw error("a peer off loopback without TLS");
    auto owner = port_guard::socket_owner(p, reinterpret_cast<sockaddr*>(&local));
    if (!owner || *owner != ::getuid())
      throw error(fmt::format("a loopback peer of uid {}, not this process's {}",
                              owner ? std::to_string(*owner) : std::string{"unknown"},
                              ::getuid()));
  }
  if (ctx_) {
    SSL* ssl = SSL_new(ctx_);
    if (!ssl)
      throw error("no TLS session: " + ssl_reason(0));
    s.attach(ssl);
    s.handshake(true);
  }
}

// One connection: authenticated, then its ticket's job, if any.
void server::serve(int fd, uint64_t id) {
  sigpipe_blocked no_sigpipe;
  auto s = std::make_unique<stream>(fd, nullptr);
  job run;
  try {
    authenticate(*s, fd);
    std::array<unsigned char, ticket_bytes> raw{};
    s->read(raw.data(), raw.size());
    auto t = to_hex(raw.data(), raw.size());
    std::lock_guard<std::mutex> lk{mu_};
    auto it = tickets_.find(t);
    if (it == tickets_.end() || it->second.until < std::chrono::steady_clock::now())
      throw error("an unknown or expired ticket");
    run = std::move(it->second.run);
    tickets_.erase(it);
  } catch (const std::exception& e) {
    if (std::has_single_bit(++refused_))
      log::warn("data link on port {}: refused a connection ({}; {} refused so far)", port_,
                e.what(), refused_.load());
  }
  if (run) {
    try {
      run(*s);
    } catch (const std::exception& e) {
      log::warn("data link on port {}: a transfer failed: {}", port_, e.what());
    }
  }
  {
    // The destructor no longer shuts this socket down: it is closed next.
    std::lock_guard<std::mutex> lk{mu_};
    auto& c = connections_[id];
    c.fd = -1;
    c.finished = true;
  }
  s.reset();
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
  return s;
}

} // namespace hvactor::data_link
