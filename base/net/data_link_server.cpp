// The data link's server (data_link.hpp): the acceptor, a thread per
// connection, the peer's credentials and its ticket.

#include "base/net/data_link.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "base/net/data_link_detail.hpp"
#include "base/net/port_guard.hpp"

namespace hvactor::data_link {

using namespace detail;

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
      || ::listen(listen_fd_, static_cast<int>(opts_.max_connections)) != 0
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
    bool full = false;
    {
      std::lock_guard<std::mutex> lk{mu_};
      full = connections_.size() >= opts_.max_connections;
    }
    // At the cap, new peers wait in the kernel's queue (the listen
    // backlog) until a transfer ends; poll() skips a negative fd.
    // A finished transfer and the destructor write wake_fd_: the loop
    // sleeps until a peer, one of them, or a stop (it woke every second to
    // reap, an idle training job's every worker and driver).
    std::array<pollfd, 2> fds{pollfd{full ? -1 : listen_fd_, POLLIN, 0},
                              pollfd{wake_fd_, POLLIN, 0}};
    ::poll(fds.data(), fds.size(), -1);
    uint64_t wakes = 0;
    if ((fds[1].revents & POLLIN) != 0 && !stopping_
        && ::read(wake_fd_, &wakes, sizeof wakes) < 0 && errno != EAGAIN)
      log::warn("data link: cannot read its wake-up: {}", std::strerror(errno));
    reap_finished();
    if (stopping_ || full || !(fds[0].revents & POLLIN))
      continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    std::lock_guard<std::mutex> lk{mu_};
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
  uint64_t one = 1; // the acceptor reaps this thread (and takes a peer if it was full)
  if (::write(wake_fd_, &one, sizeof one) < 0)
    log::warn("data link: cannot wake the acceptor: {}", std::strerror(errno));
}

} // namespace hvactor::data_link
