// The port guard's view of sockets (internal/port_guard.hpp): which user
// owns a TCP connection's socket, asked of the kernel's sock_diag netlink
// interface or, without it, read from /proc/net/tcp and tcp6; and whether
// an address is loopback. IPv4-mapped IPv6 addresses compare as IPv4.

#include "base/net/port_guard.hpp"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/net/libc_sockets.hpp"

namespace hvactor::port_guard {

namespace {

// An address in one comparable form: IPv4-mapped IPv6 becomes IPv4.
struct endpoint {
  bool v4 = true;
  uint8_t addr[16] = {};
  uint16_t port = 0; // host order

  bool operator==(const endpoint& other) const {
    return v4 == other.v4 && port == other.port
           && std::memcmp(addr, other.addr, v4 ? 4 : 16) == 0;
  }
};

std::optional<endpoint> to_endpoint(const sockaddr* sa) {
  endpoint out;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    std::memcpy(out.addr, &in->sin_addr, 4);
    out.port = ntohs(in->sin_port);
    return out;
  }
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    out.port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      std::memcpy(out.addr, in6->sin6_addr.s6_addr + 12, 4);
    } else {
      out.v4 = false;
      std::memcpy(out.addr, in6->sin6_addr.s6_addr, 16);
    }
    return out;
  }
  return std::nullopt;
}

// "0100007F:1F90" (IPv4) or 32 hex digits ":1F90" (IPv6), as the kernel
// prints them: each 32-bit word in host byte order.
std::optional<endpoint> parse_proc_endpoint(const char* text) {
  const char* colon = std::strchr(text, ':');
  if (colon == nullptr)
    return std::nullopt;
  size_t digits = static_cast<size_t>(colon - text);
  if (digits != 8 && digits != 32)
    return std::nullopt;
  uint8_t raw[16];
  for (size_t word = 0; word < digits / 8; ++word) {
    char hex[9] = {};
    std::memcpy(hex, text + word * 8, 8);
    auto value = static_cast<uint32_t>(std::strtoul(hex, nullptr, 16));
    std::memcpy(raw + word * 4, &value, 4); // back to memory order
  }
  sockaddr_storage ss{};
  if (digits == 8) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, raw, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, raw, 16);
  }
  auto out = to_endpoint(reinterpret_cast<sockaddr*>(&ss));
  if (out)
    out->port = static_cast<uint16_t>(std::strtoul(colon + 1, nullptr, 16));
  return out;
}

std::optional<uid_t> find_owner(const char* table, const endpoint& local, const endpoint& remote) {
  FILE* f = std::fopen(table, "r");
  if (f == nullptr)
    return std::nullopt;
  std::optional<uid_t> owner;
  char line[512];
  std::fgets(line, sizeof(line), f); // header
  while (!owner && std::fgets(line, sizeof(line), f) != nullptr) {
    char loc[64], rem[64];
    unsigned uid = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid ...
    if (std::sscanf(line, " %*u: %63s %63s %*x %*x:%*x %*x:%*x %*x %u", loc, rem, &uid) != 3)
      continue;
    auto l = parse_proc_endpoint(loc);
    auto r = parse_proc_endpoint(rem);
    if (l && r && *l == local && *r == remote)
      owner = static_cast<uid_t>(uid);
  }
  std::fclose(f);
  return owner;
}

// The owner of one TCP socket by its exact 4-tuple, asked of the kernel's
// sock_diag netlink interface (what `ss` uses): one round trip of some
// microseconds, where reading /proc/net/tcp walks every socket. nullopt
// when there is no such socket or the interface is unavailable.
std::optional<uid_t> diag_owner(int family, const endpoint& local, const endpoint& remote) {
  int nl = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0)
    return std::nullopt;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<uint8_t>(family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  msg.req.id.idiag_sport = htons(local.port);
  msg.req.id.idiag_dport = htons(remote.port);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  auto put = [&](uint32_t* out, const endpoint& ep) {
    if (family == AF_INET) {
      std::memcpy(out, ep.addr, 4);
    } else if (ep.v4) { // IPv4-mapped
      uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
      std::memcpy(mapped + 12, ep.addr, 4);
      std::memcpy(out, mapped, 16);
    } else {
      std::memcpy(out, ep.addr, 16);
    }
  };
  put(msg.req.id.idiag_src, local);
  put(msg.req.id.idiag_dst, remote);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uid_t> owner;
  timeval tv{1, 0};
  ::setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::sendto(nl, &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel))
      == static_cast<ssize_t>(sizeof(msg))) {
    alignas(nlmsghdr) char buf[8192];
    auto n = libc::recv(nl, buf, sizeof(buf), 0);
    if (n > 0) {
      auto* h = reinterpret_cast<nlmsghdr*>(buf);
      for (auto left = static_cast<int>(n); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
          break; // NLMSG_ERROR (no such socket) or NLMSG_DONE
        auto* d = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
        owner = static_cast<uid_t>(d->idiag_uid);
        break;
      }
    }
  }
  libc::close(nl);
  return owner;
}

} // namespace

std::optional<uid_t> socket_owner(const sockaddr* local, const sockaddr* remote) {
  auto l = to_endpoint(local);
  auto r = to_endpoint(remote);
  if (!l || !r)
    return std::nullopt;
  if (l->v4 == r->v4) {
    if (l->v4)
      if (auto owner = diag_owner(AF_INET, *l, *r))
        return owner;
    if (auto owner = diag_owner(AF_INET6, *l, *r))
      return owner;
  }
  // Without sock_diag (a kernel built without it): the tables in /proc.
  if (auto owner = find_owner("/proc/net/tcp", *l, *r))
    return owner;
  return find_owner("/proc/net/tcp6", *l, *r);
}

bool is_loopback(const sockaddr* addr) {
  auto ep = to_endpoint(addr);
  if (!ep)
    return false;
  if (ep->v4)
    return ep->addr[0] == 127;
  static const uint8_t v6_loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(ep->addr, v6_loopback, 16) == 0;
}

} // namespace hvactor::port_guard
