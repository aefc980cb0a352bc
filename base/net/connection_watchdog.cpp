#include "base/net/connection_watchdog.hpp"

#include "base/internal/log.hpp"
#include "base/net/tls_handshake.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/tcp.h> // glibc's <netinet/tcp.h> lacks tcpi_bytes_received
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hvactor {

namespace {

// tcpi_state values (the kernel's enum in net/tcp_states.h, not exported by
// <linux/tcp.h>).
constexpr uint8_t tcp_established = 1;
constexpr uint8_t tcp_close_wait = 8;

using clock_duration = std::chrono::steady_clock::duration;

/// One accepted TCP connection on a watched port, as seen in this scan.
struct connection {
  int fd = -1;
  ino_t inode = 0;
  uint16_t port = 0;
  std::chrono::milliseconds idle{0};
  std::string peer;
};

/// The inode of a socket descriptor from its /proc/self/fd link
/// ("socket:[12345]"), or 0 for anything else.
ino_t socket_inode(const char* fd_name) {
  char link[64];
  auto path = std::string{"/proc/self/fd/"} + fd_name;
  auto n = ::readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0)
    return 0;
  link[n] = '\0';
  if (std::strncmp(link, "socket:[", 8) != 0)
    return 0;
  return static_cast<ino_t>(std::strtoull(link + 8, nullptr, 10));
}

/// Port of an AF_INET/AF_INET6 address, nullopt for other families.
std::optional<uint16_t> port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return std::nullopt;
}

std::string peer_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  const void* raw = addr.ss_family == AF_INET
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in&>(addr).sin_addr)
                      : static_cast<const void*>(&reinterpret_cast<sockaddr_in6&>(addr).sin6_addr);
  ::inet_ntop(addr.ss_family, raw, host, sizeof(host));
  auto port = port_of(addr).value_or(0);
  return addr.ss_family == AF_INET6 ? "[" + std::string{host} + "]:" + std::to_string(port)
                                    : std::string{host} + ":" + std::to_string(port);
}

/// Reads TCP_INFO of `fd` when it is an established (or half-closed) TCP
/// connection on one of `ports`; `never_received` tells whether it has not
/// received a byte yet. Nullopt for anything else, and when the fd number
/// no longer refers to `inode` (CAF closed it and reused the number).
std::optional<connection> inspect(int fd, ino_t inode, const std::set<uint16_t>& ports,
                                  bool& never_received) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return std::nullopt;
  auto port = port_of(local);
  if (!port || ports.count(*port) == 0)
    return std::nullopt;
  int protocol = 0;
  socklen_t plen = sizeof(protocol);
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &plen) != 0 || protocol != IPPROTO_TCP)
    return std::nullopt;
  tcp_info info{};
  socklen_t ilen = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &ilen) != 0)
    return std::nullopt;
  // Listening sockets and connections already shutting down are not ours.
  if (info.tcpi_state != tcp_established && info.tcpi_state != tcp_close_wait)
    return std::nullopt;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_ino != inode)
    return std::nullopt;
  // Kernels before 4.1 return a shorter struct without tcpi_bytes_received;
  // then trust tcpi_last_data_recv, which starts at the connection's setup.
  auto bytes_end = offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received);
  never_received = ilen >= bytes_end && info.tcpi_bytes_received == 0;
  connection result;
  result.fd = fd;
  result.inode = inode;
  result.port = *port;
  result.idle = std::chrono::milliseconds{info.tcpi_last_data_recv};
  return result;
}

/// shutdown() of the socket `c` names, through a dup checked against its
/// inode, so a descriptor number CAF closed and reused in the meantime is
/// never touched. Never close()s CAF's descriptor.
bool shut_down(const connection& c) {
  int dup = ::fcntl(c.fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0)
    return false;
  struct stat st;
  bool same = ::fstat(dup, &st) == 0 && st.st_ino == c.inode;
  bool done = same && ::shutdown(dup, SHUT_RDWR) == 0;
  ::close(dup); // drops our reference only; CAF still holds the socket
  return done;
}

// Every live watchdog, for connection_accepted.
struct registry {
  std::mutex mtx;
  std::set<connection_watchdog*> dogs;
  std::atomic<size_t> count{0};
};

registry& dogs() {
  static auto* r = new registry; // never destroyed: accept may run during exit
  return *r;
}

/// A connection that needs no more watching: its TLS handshake completed
/// and it received data after it was `idle_limit` old (a live CAF peer:
/// heartbeats; CAF drops it itself once it falls silent).
bool proves_itself(const connection& c, clock_duration age, std::chrono::milliseconds idle_limit) {
  return age >= idle_limit && c.idle < idle_limit
         && hvactor::tls_handshake::completed(c.fd, c.inode);
}

} // namespace

connection_watchdog::connection_watchdog(options opts) : opts_(opts) {
  if (opts_.idle_limit.count() <= 0 || opts_.period.count() <= 0)
    throw std::invalid_argument("connection_watchdog: idle_limit and period must be positive");
  if (opts_.max_connections == 0)
    throw std::invalid_argument("connection_watchdog: max_connections must be at least 1");
  thread_ = std::thread{[this] { run(); }};
  auto& r = dogs();
  std::lock_guard<std::mutex> guard{r.mtx};
  r.dogs.insert(this);
  r.count = r.dogs.size();
}

connection_watchdog::~connection_watchdog() {
  {
    auto& r = dogs();
    std::lock_guard<std::mutex> guard{r.mtx};
    r.dogs.erase(this);
    r.count = r.dogs.size();
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void connection_watchdog::connection_accepted() {
  auto& r = dogs();
  if (r.count.load() == 0)
    return;
  std::lock_guard<std::mutex> guard{r.mtx};
  for (auto* dog : r.dogs)
    dog->wake();
}

void connection_watchdog::wake() {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    active_ = true;
  }
  cv_.notify_all();
}

bool connection_watchdog::scanning() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return active_;
}

void connection_watchdog::watch(uint16_t port) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ports_.insert(port);
  }
  wake(); // connections may be there already
}

void connection_watchdog::unwatch(uint16_t port) {
  std::lock_guard<std::mutex> guard{mtx_};
  ports_.erase(port);
}

size_t connection_watchdog::shut_down_count() const noexcept {
  return shut_down_.load();
}

void connection_watchdog::run() {
  pthread_setname_np(pthread_self(), "hvactor.wdog");
  std::unique_lock<std::mutex> guard{mtx_};
  for (;;) {
    // Asleep until an accept or a watch() while nothing needs watching.
    cv_.wait(guard, [this] { return stop_ || active_; });
    if (cv_.wait_for(guard, opts_.period, [this] { return stop_; }))
      return;
    active_ = false; // an accept during the scan sets it again
    guard.unlock();
    bool pending = scan_once();
    guard.lock();
    active_ = active_ || pending;
  }
}

bool connection_watchdog::scan_once() {
  std::lock_guard<std::mutex> scan_guard{scan_mtx_};
  std::set<uint16_t> ports;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    ports = ports_;
  }
  auto now = clock::now();
  std::map<connection_key, clock::time_point> seen;
  std::set<connection_key> proven;
  bool pending = false;
  std::vector<connection> found;
  DIR* dir = ports.empty() ? nullptr : ::opendir("/proc/self/fd");
  if (dir) {
    int own_fd = ::dirfd(dir);
    while (auto* entry = ::readdir(dir)) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
        continue;
      int fd = std::atoi(entry->d_name);
      ino_t inode = fd == own_fd ? 0 : socket_inode(entry->d_name);
      if (inode == 0)
        continue;
      bool never_received = false;
      auto c = inspect(fd, inode, ports, never_received);
      if (!c)
        continue;
      connection_key key{fd, inode};
      auto first = first_seen_.find(key);
      auto since = first != first_seen_.end() ? first->second : now;
      seen.emplace(key, since);
      if (never_received)
        c->idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - since);
      if (proven_.count(key) != 0 || proves_itself(*c, now - since, opts_.idle_limit))
        proven.insert(key);
      else
        pending = true;
      found.push_back(std::move(*c));
    }
    ::closedir(dir);
  }
  first_seen_ = std::move(seen); // forgets connections that are gone
  proven_ = std::move(proven);
  auto shut = [&](const connection& c, const std::string& why) {
    auto peer = peer_of(c.fd);
    if (!shut_down(c))
      return;
    ++shut_down_;
    log::warn("connection watchdog: shut down the connection from {} on port {}: {}", peer,
              c.port, why);
  };
  // Idlest first, so the per-port limit below drops the idlest ones.
  std::sort(found.begin(), found.end(),
            [](const connection& a, const connection& b) { return a.idle > b.idle; });
  std::map<uint16_t, size_t> remaining;
  for (const auto& c : found)
    ++remaining[c.port];
  for (const auto& c : found) {
    if (c.idle > opts_.idle_limit) {
      shut(c, "no data for " + std::to_string(c.idle.count()) + " ms (limit "
                + std::to_string(opts_.idle_limit.count()) + " ms; a stalled TLS handshake?)");
      --remaining[c.port];
    } else if (remaining[c.port] > opts_.max_connections) {
      shut(c, "more than " + std::to_string(opts_.max_connections)
                + " connections on the port; this one was among the idlest");
      --remaining[c.port];
    }
  }
  return pending;
}

} // namespace hvactor
