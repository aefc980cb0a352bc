#include "peer_addresses.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/address.h>

#include "collectives/internal/rendezvous_knobs.hpp"
#include "base/internal/log.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

using clock = std::chrono::steady_clock;
using ::gloo::transport::tcp::Address;

const Address& tcp_address(::gloo::transport::Pair& pair) {
  return dynamic_cast<const Address&>(pair.address());
}

std::string ip_of(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, text, sizeof text);
  else if (ss.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, text,
                sizeof text);
  return text;
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return 0;
}

Address make_address(const std::string& ip, int port) {
  sockaddr_storage ss{};
  bool ok;
  if (ip.find(':') == std::string::npos) {
    auto& in = reinterpret_cast<sockaddr_in&>(ss);
    in.sin_family = AF_INET;
    in.sin_port = htons(static_cast<uint16_t>(port));
    ok = ::inet_pton(AF_INET, ip.c_str(), &in.sin_addr) == 1;
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(ss);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    ok = ::inet_pton(AF_INET6, ip.c_str(), &in6.sin6_addr) == 1;
  }
  if (!ok)
    throw std::invalid_argument("not a numeric address: '" + ip + "'");
  return Address(ss);
}

// How a person reads the address (Gloo prints the port's bytes swapped).
std::string readable(const std::string& ip, int port) {
  return ip.find(':') == std::string::npos ? fmt::format("{}:{}", ip, port)
                                           : fmt::format("[{}]:{}", ip, port);
}

// Gloo's rule: the side whose address compares larger connects.
bool connects(const Address& self, const Address& peer) {
  auto& a = self.getSockaddr();
  auto& b = peer.getSockaddr();
  if (a.ss_family == AF_INET) {
    auto& x = reinterpret_cast<const sockaddr_in&>(a);
    auto& y = reinterpret_cast<const sockaddr_in&>(b);
    int rv = std::memcmp(&x.sin_addr, &y.sin_addr, sizeof x.sin_addr);
    return rv != 0 ? rv > 0 : x.sin_port > y.sin_port;
  }
  auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  int rv = std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr);
  return rv != 0 ? rv > 0 : x.sin6_port > y.sin6_port;
}

// A connect that may well succeed a moment later: the peer's node has no
// neighbour entry or route for it yet, or is too busy to answer in time.
bool transient(const std::string& what) {
  for (int e : {EHOSTUNREACH, ENETUNREACH, ECONNREFUSED, ETIMEDOUT, EADDRNOTAVAIL, ECONNRESET})
    if (what.find(std::strerror(e)) != std::string::npos)
      return true;
  return false;
}

// Gloo's text without its "[file:line] " prefix.
std::string gloo_reason(const std::string& what) {
  auto at = what.find("] ");
  return at != std::string::npos && !what.empty() && what[0] == '[' ? what.substr(at + 2) : what;
}

std::string seconds_since(clock::time_point t0) {
  return fmt::format("{:.1f} s",
                     std::chrono::duration<double>(clock::now() - t0).count());
}

// Connects this rank's side of the pair with `r` (this rank connects),
// retrying transient errors with a fresh pair each time.
void connect_one(::gloo::transport::Context& tc, int r, const mesh_card& peer, int me,
                 int local_rank, clock::time_point deadline, std::mt19937& rng) {
  auto target = make_address(peer.ip, peer.ports[static_cast<size_t>(me)]);
  auto bytes = target.bytes();
  auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(knobs::mesh_retry_first_pause);
  auto t0 = clock::now();
  for (int attempt = 1;; ++attempt) {
    std::string why;
    try {
      tc.getPair(r)->connect(bytes);
      return;
    } catch (const ::gloo::IoException& e) {
      why = gloo_reason(e.what());
    }
    std::uniform_int_distribution<int64_t> spread(pause.count() / 2, pause.count() * 3 / 2);
    std::chrono::milliseconds wait{spread(rng)};
    bool again = transient(why) && attempt < knobs::mesh_connect_attempts
                 && clock::now() + wait < deadline;
    if (again) {
      log::debug("hvd::init: connecting to rank {} at {} failed ({}), attempt {}; again in {} ms",
                 r, readable(peer.ip, peer.ports[static_cast<size_t>(me)]), why, attempt,
                 wait.count());
      std::this_thread::sleep_for(wait);
      pause = std::min(pause * 2, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    knobs::mesh_retry_longest_pause));
      // A failed pair is closed for good; the peer still listens on its
      // own. A new pair keeps the connecting side unless both ranks share
      // an address (then the ports decide, and a new port may not).
      auto& fresh = tc.createPair(r);
      fresh->setLocalRank(local_rank);
      again = connects(tcp_address(*fresh), target);
    }
    if (!again)
      throw mesh_unreachable(
        r, readable(peer.ip, peer.ports[static_cast<size_t>(me)]),
        fmt::format("cannot connect to rank {} ({}) at {}: {} ({} attempt{} over {}{})", r,
                    peer.host, readable(peer.ip, peer.ports[static_cast<size_t>(me)]),
                    why, attempt, attempt == 1 ? "" : "s", seconds_since(t0),
                    transient(why) ? "; a transient error is retried until the rendezvous "
                                     "deadline"
                                   : ""));
  }
}

} // namespace

std::string encode(const mesh_card& card) {
  std::string out = card.host + '\n' + card.hostname + '\n' + card.ip + '\n';
  for (size_t r = 0; r < card.ports.size(); ++r)
    out += (r ? " " : "") + std::to_string(card.ports[r]);
  return out;
}

mesh_card decode_card(const std::string& text, int size) {
  std::istringstream in{text};
  mesh_card card;
  std::getline(in, card.host);
  std::getline(in, card.hostname);
  std::getline(in, card.ip);
  for (int port; in >> port;)
    card.ports.push_back(port);
  if (card.ip.empty() || card.ports.size() != static_cast<size_t>(size))
    throw std::invalid_argument(
      fmt::format("not a mesh card of {} ports: '{}'", size, text.substr(0, 200)));
  return card;
}

std::vector<mesh_card> exchange_cards(rendezvous_client& client, const std::string& prefix, int me,
                                      const mesh_card& mine, std::chrono::milliseconds bound) {
  const int size = static_cast<int>(mine.ports.size());
  auto key = [&](int r) { return prefix + "/mesh/" + std::to_string(r); };
  auto text = encode(mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r)
    keys.push_back(key(r));
  // One request: this rank's card in, every rank's out.
  auto got = client.gather({{key(me), std::vector<char>(text.begin(), text.end())}}, keys, bound);
  if (!got.missing.empty()) {
    // This attempt is over: a retry under the same prefix (hvd::init
    // counts only connections made) must not find this card, whose pairs
    // are gone.
    client.erase(key(me));
    std::vector<std::string> arrived;
    for (int r = 0; r < size; ++r)
      if (std::find(got.missing.begin(), got.missing.end(), r) == got.missing.end())
        arrived.push_back(fmt::format(
          "{} on {}", r,
          decode_card(std::string(got.values[static_cast<size_t>(r)].begin(),
                                  got.values[static_cast<size_t>(r)].end()),
                      size)
            .host));
    throw rendezvous_timeout(fmt::format(
      "hvd::init on rank {} ({}): rank{} {} of {} never joined the collectives rendezvous "
      "(scope '{}', '{}') within {:g} s; arrived: {}. Every rank must call hvd::init(); a rank "
      "that crashed or is still busy before it shows up here",
      me, mine.host, got.missing.size() == 1 ? "" : "s", fmt::join(got.missing, ", "), size,
      client.scope(), prefix, bound.count() / 1000.0, fmt::join(arrived, ", ")));
  }
  auto& values = got.values;
  std::vector<mesh_card> cards;
  for (auto& v : values)
    cards.push_back(decode_card(std::string(v.begin(), v.end()), size));
  return cards;
}

mesh_card create_pairs(::gloo::transport::Context& tc, const std::string& host) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    throw std::system_error(errno, std::system_category(), "gethostname");
  mesh_card card{.host = host, .hostname = name, .ip = {}, .ports = {}};
  card.ports.assign(static_cast<size_t>(tc.size), 0);
  for (int r = 0; r < tc.size; ++r) {
    if (r == tc.rank)
      continue;
    auto& ss = tcp_address(*tc.createPair(r)).getSockaddr();
    card.ip = ip_of(ss);
    card.ports[static_cast<size_t>(r)] = port_of(ss);
  }
  return card;
}

void connect_pairs(::gloo::transport::Context& tc, int me, const std::vector<mesh_card>& cards,
                   std::chrono::steady_clock::time_point deadline) {
  const int n = tc.size;
  int local_rank = 0;
  for (int r = 0; r < me; ++r)
    local_rank += cards[static_cast<size_t>(r)].hostname == cards[static_cast<size_t>(me)].hostname;
  std::mt19937 rng{std::random_device{}() ^ static_cast<unsigned>(me)};
  std::vector<int> accepting;
  for (int k = 1; k < n; ++k) {
    int r = (me + k) % n;
    auto& pair = tc.getPair(r);
    pair->setLocalRank(local_rank);
    auto& card = cards[static_cast<size_t>(r)];
    if (!connects(tcp_address(*pair), make_address(card.ip, card.ports[static_cast<size_t>(me)])))
      accepting.push_back(r);
    else
      connect_one(tc, r, card, me, local_rank, deadline, rng);
  }
  for (int r : accepting) {
    auto& card = cards[static_cast<size_t>(r)];
    try {
      tc.getPair(r)->connect(
        make_address(card.ip, card.ports[static_cast<size_t>(me)]).bytes());
    } catch (const ::gloo::IoException& e) {
      auto where = readable(card.ip, card.ports[static_cast<size_t>(me)]);
      throw mesh_unreachable(r, where,
                             fmt::format("rank {} ({}) never connected from {}: {}", r, card.host,
                                         where, gloo_reason(e.what())));
    }
  }
}

std::string listened_address(const std::vector<mesh_card>& cards, int r, int me) {
  auto& card = cards[static_cast<size_t>(r)];
  return make_address(card.ip, card.ports[static_cast<size_t>(me)]).str();
}

std::string connected_addresses(::gloo::transport::Context& tc) {
  std::string out;
  for (int r = 0; r < tc.size; ++r) {
    if (r != tc.rank)
      out += tc.getPair(r)->address().str();
    out += '\n';
  }
  return out;
}

void add_peer_addresses(std::map<std::string, int>& peers, const std::vector<mesh_card>& cards,
                        const std::vector<std::optional<std::string>>& published, int me) {
  for (int r = 0; r < static_cast<int>(cards.size()); ++r) {
    if (r == me)
      continue;
    peers[listened_address(cards, r, me)] = r;
    if (static_cast<size_t>(r) >= published.size() || !published[static_cast<size_t>(r)])
      continue;
    std::istringstream in{*published[static_cast<size_t>(r)]};
    std::string line;
    for (int i = 0; i <= me && std::getline(in, line); ++i)
      if (i == me && !line.empty())
        peers[line] = r;
  }
}

} // namespace hvactor::collectives
