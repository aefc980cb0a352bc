// The port guard (internal/port_guard.hpp): checks below CAF, at the socket
// calls its plain transport makes. These definitions interpose libc's
// accept, accept4, recv, connect and close (symbol lookup finds this
// library before libc) and forward to the real functions
// (internal/libc_sockets.hpp). Only sockets the guard knows get any check;
// every other call costs one table lookup. This file holds the policy, the
// guarded ports and connections, and the checks; whose socket is whose is
// socket_owner.cpp's.

#include "base/net/port_guard.hpp"
#include "base/net/loop_pacer.hpp"
#include "base/net/recv_spin.hpp"
#include "base/net/connection_watchdog.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>

#include "base/internal/knobs_net.hpp"
#include "base/net/libc_sockets.hpp"
#include "base/internal/log.hpp"

namespace hvactor::port_guard {

namespace {

// BASP (CAF 0.17.6, caf/io/basp/header.hpp): a 32-byte header in network
// byte order, operation(1) pad(2) flags(1) payload_len(4) operation_data(8)
// source_actor(8) dest_actor(8), then payload_len bytes.
constexpr size_t basp_header_size = 32;
constexpr size_t basp_payload_len_offset = 4;
// Operations whose handler deserializes the payload without checking that
// there is one: in 0.17.6 (basp/instance.cpp, instance::handle) a valid
// handshake header announcing 0 bytes dereferences a null payload, so 32
// bytes from any peer crash the process (SIGSEGV in the multiplexer).
constexpr uint8_t basp_server_handshake = 0x00;
constexpr uint8_t basp_client_handshake = 0x01;

constexpr int max_tracked_fd = 1 << 16;
constexpr size_t max_ports = 64;
// Longest one accept call spends refusing connections before it returns to
// CAF's event loop (guarded_accept).
constexpr auto accept_refusal_budget = std::chrono::milliseconds{2};

struct port_entry {
  std::atomic<uint16_t> port{0};
  std::atomic<size_t> connections{0};
  // Bumped each time the entry is given to a port: a connection accepted
  // under an earlier port of this entry must not be subtracted from the new
  // one's count when it closes (it would wrap the count around, and every
  // later connection would be refused as over the cap).
  std::atomic<uint32_t> generation{0};
  // Whether its connections carry BASP (CAF's ports) and get the framing
  // check; false for another protocol on a guarded port (the dashboard's
  // HTTP), which gets only the accept-time checks.
  std::atomic<bool> frames{true};
};

// One accepted connection on a guarded port; touched by the thread that
// reads it (CAF's multiplexer) and by close().
struct fd_slot {
  std::atomic<uint8_t> port_index{0}; // 1 + index into ports_, 0: untracked
  uint32_t generation = 0;            // the entry's generation when accepted
  uint8_t header[basp_header_size];
  uint8_t header_fill = 0;
  uint32_t payload_left = 0;
};

std::array<port_entry, max_ports> ports_;
fd_slot slots_[max_tracked_fd];

std::mutex policy_mu_;
policy policy_{true, true, knobs::max_message_bytes, knobs::max_connections_per_port, false};
std::atomic<bool> same_user_{true};
std::atomic<bool> check_frames_{true};
std::atomic<bool> check_connects_{false};
std::atomic<uint32_t> max_message_bytes_{knobs::max_message_bytes};
std::atomic<size_t> max_connections_{knobs::max_connections_per_port};

std::atomic<uint64_t> refused_other_user_{0};
std::atomic<uint64_t> refused_oversized_{0};
std::atomic<uint64_t> refused_empty_handshakes_{0};
std::atomic<uint64_t> refused_over_cap_{0};
std::atomic<uint64_t> refused_connects_{0};

// Logs the first refusals of each kind, then every 1000th: a flood of
// refused connections must not flood the log.
bool worth_logging(uint64_t count) {
  return count <= 10 || count % 1000 == 0;
}

// The port of an IPv4 or IPv6 address (host order).
std::optional<uint16_t> port_of(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  if (sa->sa_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
  return std::nullopt;
}

int port_index_of(uint16_t port) {
  for (size_t i = 0; i < ports_.size(); ++i)
    if (ports_[i].port.load() == port)
      return static_cast<int>(i);
  return -1;
}

std::string text_of(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
  }
  return std::string{host} + ":" + std::to_string(port);
}

// False when the peer of the accepted connection `fd` already reset it
// while it waited to be accepted (a port scan, a flood of resets): it needs
// no owner lookup, counts against no cap, and is not worth a log line.
bool peer_still_there(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
    return true; // no answer: the checks below decide
  return info.tcpi_state == TCP_ESTABLISHED || info.tcpi_state == TCP_CLOSE_WAIT;
}

// Whether the connection `fd` (just accepted on a guarded port, peer
// `peer`) may stay; logs why not.
bool admit(int fd, const sockaddr* peer, uint16_t port, port_entry& entry) {
  if (!peer_still_there(fd))
    return false;
  if (entry.connections.load() >= max_connections_.load()) {
    auto n = ++refused_over_cap_;
    if (worth_logging(n))
      log::warn("port guard: refused a connection from {} on port {}: {} connections already "
                "(refused so far: {})",
                text_of(peer), port, max_connections_.load(), n);
    return false;
  }
  if (!same_user_.load() || !is_loopback(peer))
    return true;
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return false;
  auto owner = socket_owner(peer, reinterpret_cast<sockaddr*>(&local));
  if (owner && *owner == ::geteuid())
    return true;
  auto n = ++refused_other_user_;
  if (worth_logging(n))
    log::warn("port guard: refused a connection from {} on port {}: {} (this cluster admits only "
              "processes of uid {} on loopback; --insecure admits everyone; refused so far: {})",
              text_of(peer), port,
              owner ? "its process belongs to uid " + std::to_string(*owner)
                    : std::string{"its owner could not be found"},
              ::geteuid(), n);
  return false;
}

// What the framing check found in the bytes of one recv.
enum class frame_verdict { ok, oversized, empty_handshake };

// Follows the BASP framing over the bytes a recv returned; stops at the
// first header that announces more than the limit, or a handshake without
// a payload (which CAF would crash on).
frame_verdict check_frames(fd_slot& slot, const uint8_t* data, size_t n) {
  while (n > 0) {
    if (slot.payload_left > 0) {
      auto take = std::min<size_t>(n, slot.payload_left);
      slot.payload_left -= static_cast<uint32_t>(take);
      data += take;
      n -= take;
      continue;
    }
    auto take = std::min<size_t>(n, basp_header_size - slot.header_fill);
    std::memcpy(slot.header + slot.header_fill, data, take);
    slot.header_fill = static_cast<uint8_t>(slot.header_fill + take);
    data += take;
    n -= take;
    if (slot.header_fill < basp_header_size)
      continue;
    uint32_t len_be;
    std::memcpy(&len_be, slot.header + basp_payload_len_offset, 4);
    slot.header_fill = 0;
    slot.payload_left = ntohl(len_be);
    if (slot.payload_left > max_message_bytes_.load())
      return frame_verdict::oversized;
    auto op = slot.header[0];
    if (slot.payload_left == 0 && (op == basp_server_handshake || op == basp_client_handshake))
      return frame_verdict::empty_handshake;
  }
  return frame_verdict::ok;
}

// Whether the guarded port `listener` listens on carries BASP (true too
// for a port the guard does not know).
bool carries_basp(int listener) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return true;
  auto port = port_of(reinterpret_cast<sockaddr*>(&local));
  int index = port ? port_index_of(*port) : -1;
  return index < 0 || ports_[static_cast<size_t>(index)].frames.load();
}

// A freshly accepted fd on listening socket `listener`: tracked and
// admitted, or closed (-1).
int on_accepted(int listener, int fd, const sockaddr* peer_hint) {
  if (fd < 0)
    return fd;
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return fd;
  auto local_port = port_of(reinterpret_cast<sockaddr*>(&local));
  int index = local_port ? port_index_of(*local_port) : -1;
  if (index < 0)
    return fd; // not a guarded port (Gloo's, a test's)
  sockaddr_storage peer{};
  if (peer_hint != nullptr) {
    std::memcpy(&peer, peer_hint, sizeof(sockaddr_storage));
  } else {
    socklen_t plen = sizeof(peer);
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen);
  }
  auto& entry = ports_[static_cast<size_t>(index)];
  if (fd >= max_tracked_fd || !admit(fd, reinterpret_cast<sockaddr*>(&peer), *local_port, entry)) {
    libc::close(fd);
    return -1;
  }
  ++entry.connections;
  auto& slot = slots_[fd];
  slot.header_fill = 0;
  slot.payload_left = 0;
  slot.generation = entry.generation.load();
  slot.port_index.store(static_cast<uint8_t>(index + 1));
  return fd;
}

} // namespace

void configure(const policy& p) {
  std::lock_guard<std::mutex> guard{policy_mu_};
  policy_ = p;
  same_user_ = p.same_user;
  check_frames_ = p.check_frames;
  check_connects_ = p.check_connects;
  max_message_bytes_ = p.max_message_bytes;
  max_connections_ = p.max_connections;
}

policy current() {
  std::lock_guard<std::mutex> guard{policy_mu_};
  return policy_;
}

void watch(uint16_t port, bool basp) {
  if (port_index_of(port) >= 0)
    return;
  for (auto& entry : ports_) {
    uint16_t free = 0;
    if (entry.port.compare_exchange_strong(free, port)) {
      ++entry.generation;
      entry.connections = 0;
      entry.frames = basp;
      return;
    }
  }
  log::warn("port guard: more than {} published ports; port {} is not guarded", max_ports, port);
}

void unwatch(uint16_t port) {
  int index = port_index_of(port);
  if (index >= 0)
    ports_[static_cast<size_t>(index)].port = 0;
}

counters refused() {
  return {refused_other_user_.load(), refused_oversized_.load(), refused_over_cap_.load(),
          refused_connects_.load(), refused_empty_handshakes_.load()};
}

} // namespace hvactor::port_guard

using namespace hvactor::port_guard;

namespace {

// accept/accept4 through the guard: the next connection the guard admits,
// or -1. Refused connections are closed and the next pending one taken, for
// at most accept_refusal_budget; then the call fails with
// ECONNABORTED (accept's word for a connection reset while pending; CAF
// ignores it). CAF's multiplexer thread runs this: looping through a whole
// flood of resets kept it from its heartbeats past the connection timeout,
// and the process dropped its real peers (a node lost the head). The
// listener stays readable, so epoll (level-triggered) brings CAF back.
template <class Accept>
int guarded_accept(int fd, sockaddr* addr, socklen_t* len, Accept real_call) {
  auto until = std::chrono::steady_clock::now() + accept_refusal_budget;
  for (;;) {
    sockaddr_storage peer{};
    socklen_t plen = sizeof(peer);
    int got = real_call(reinterpret_cast<sockaddr*>(&peer), &plen);
    if (got < 0)
      return got;
    int kept = on_accepted(fd, got, reinterpret_cast<sockaddr*>(&peer));
    if (kept >= 0) {
      hvactor::connection_watchdog::connection_accepted(); // it watches until it proved itself
      if (addr != nullptr && len != nullptr) {
        std::memcpy(addr, &peer, std::min<size_t>(*len, plen));
        *len = plen;
      }
      return kept;
    }
    // A listener of another protocol (the dashboard's HTTP server, whose
    // accept thread stops at any error but EMFILE) waits for its next
    // connection instead.
    if (std::chrono::steady_clock::now() >= until && carries_basp(fd)) {
      errno = ECONNABORTED;
      return -1;
    }
  }
}

} // namespace

extern "C" {

int accept(int fd, sockaddr* addr, socklen_t* len) {
  return guarded_accept(fd, addr, len, [fd](sockaddr* peer, socklen_t* plen) {
    return libc::accept(fd, peer, plen);
  });
}

int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return guarded_accept(fd, addr, len, [fd, flags](sockaddr* peer, socklen_t* plen) {
    return libc::accept4(fd, peer, plen, flags);
  });
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  const auto* spin = hvactor::recv_spin::current();
  auto n = spin ? hvactor::recv_spin::recv(*spin, fd, buf, len, flags)
                : libc::recv(fd, buf, len, flags);
  if (n <= 0 || fd < 0 || fd >= max_tracked_fd || (flags & MSG_PEEK) != 0)
    return n;
  auto& slot = slots_[fd];
  auto index = slot.port_index.load(std::memory_order_relaxed);
  if (index == 0 || !check_frames_.load() || !ports_[index - 1u].frames.load())
    return n;
  auto verdict = check_frames(slot, static_cast<const uint8_t*>(buf), static_cast<size_t>(n));
  if (verdict == frame_verdict::ok)
    return n;
  auto port = ports_[slot.port_index.load() - 1u].port.load();
  if (verdict == frame_verdict::oversized) {
    auto count = ++refused_oversized_;
    if (worth_logging(count))
      hvactor::log::warn("port guard: closed a connection on port {} whose message header "
                         "announced {} bytes (limit {}; HVACTOR_MAX_MESSAGE_BYTES raises it; "
                         "closed so far: {})",
                         port, slot.payload_left, max_message_bytes_.load(), count);
  } else {
    auto count = ++refused_empty_handshakes_;
    if (worth_logging(count))
      hvactor::log::warn("port guard: closed a connection on port {} that sent a handshake "
                         "without a payload (not a CAF peer; closed so far: {})",
                         port, count);
  }
  // CAF never sees these bytes: the read fails as if the peer reset.
  ::shutdown(fd, SHUT_RDWR);
  errno = ECONNRESET;
  return -1;
}

int connect(int fd, const sockaddr* addr, socklen_t len) {
  int rc = libc::connect(fd, addr, len);
  if (rc != 0 || !check_connects_.load() || !same_user_.load() || addr == nullptr
      || !is_loopback(addr))
    return rc;
  int type = 0;
  socklen_t tlen = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM)
    return rc;
  sockaddr_storage local{};
  socklen_t llen = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0)
    return rc;
  // The server's end of this connection: local = its address, remote = ours.
  auto owner = socket_owner(addr, reinterpret_cast<sockaddr*>(&local));
  if (owner && *owner == ::geteuid())
    return rc;
  auto n = ++refused_connects_;
  if (worth_logging(n))
    hvactor::log::warn("port guard: refused to talk to {}: {} (only processes of uid {} are "
                       "trusted on loopback; --insecure trusts everyone)",
                       text_of(addr),
                       owner ? "the port belongs to uid " + std::to_string(*owner)
                             : std::string{"its owner could not be found"},
                       ::geteuid());
  ::shutdown(fd, SHUT_RDWR);
  errno = ECONNREFUSED;
  return -1;
}

int close(int fd) {
  hvactor::loop_pacer::on_close(fd);
  if (fd >= 0 && fd < max_tracked_fd) {
    auto& slot = slots_[fd];
    auto index = slot.port_index.exchange(0);
    if (index != 0) {
      auto& entry = ports_[index - 1u];
      if (entry.generation.load() == slot.generation)
        --entry.connections;
    }
  }
  return libc::close(fd);
}

} // extern "C"
