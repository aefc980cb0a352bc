#include "peer_addresses.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/common/error.h>
#include <gloo/transport/tcp/address.h>

#include "collectives/rendezvous/rendezvous_knobs.hpp"
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
    // are gone. The "gone" key, set first, tells the ranks still waiting
    // that this one came and gave up (its bound ran out first, as it
    // came first), so that they do not say it never joined.
    auto gone = [&](int r) { return prefix + "/gone/" + std::to_string(r); };
    std::vector<std::string> gone_keys;
    for (int r : got.missing)
      gone_keys.push_back(gone(r));
    rendezvous_client::gathered left;
    left.missing.resize(gone_keys.size());
    std::iota(left.missing.begin(), left.missing.end(), 0);
    try {
      client.set(gone(me), std::vector<char>{'1'});
      client.erase(key(me));
      left = client.gather({}, gone_keys, std::chrono::milliseconds{0});
    } catch (const std::exception&) {
      // The store is gone too: the timeout is still what to report.
    }
    std::vector<int> never, gave_up;
    for (size_t i = 0; i < got.missing.size(); ++i)
      (std::find(left.missing.begin(), left.missing.end(), static_cast<int>(i)) == left.missing.end()
         ? gave_up
         : never)
        .push_back(got.missing[i]);
    std::vector<std::string> arrived;
    for (int r = 0; r < size; ++r)
      if (std::find(got.missing.begin(), got.missing.end(), r) == got.missing.end())
        arrived.push_back(fmt::format(
          "{} on {}", r,
          decode_card(std::string(got.values[static_cast<size_t>(r)].begin(),
                                  got.values[static_cast<size_t>(r)].end()),
                      size)
            .host));
    auto gave_up_text =
      gave_up.empty() ? std::string{}
                      : fmt::format("; came but gave up at their own bound: {}", fmt::join(gave_up, ", "));
    if (never.empty())
      throw rendezvous_timeout(fmt::format(
        "hvd::init on rank {} ({}): not every rank of {} was in the collectives rendezvous at once "
        "(scope '{}', '{}') within {:g} s; arrived: {}{}. Every rank must call hvd::init() within "
        "the timeout of the others",
        me, mine.host, size, client.scope(), prefix, bound.count() / 1000.0,
        fmt::join(arrived, ", "), gave_up_text));
    throw rendezvous_timeout(fmt::format(
      "hvd::init on rank {} ({}): rank{} {} of {} never joined the collectives rendezvous "
      "(scope '{}', '{}') within {:g} s; arrived: {}{}. Every rank must call hvd::init(); a rank "
      "that crashed or is still busy before it shows up here",
      me, mine.host, never.size() == 1 ? "" : "s", fmt::join(never, ", "), size, client.scope(),
      prefix, bound.count() / 1000.0, fmt::join(arrived, ", "), gave_up_text));
  }
  auto& values = got.values;
  std::vector<mesh_card> cards;
  for (auto& v : values)
    cards.push_back(decode_card(std::string(v.begin(), v.end()), size));
  return cards;
}

mesh_card create_pairs(::gloo::transport::Context& tc, const std::string& host,
                       const std::vector<int>& only) {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    throw std::system_error(errno, std::system_category(), "gethostname");
  mesh_card card{.host = host, .hostname = name, .ip = {}, .ports = {}};
  card.ports.assign(static_cast<size_t>(tc.size), 0);
  for (int r = 0; r < tc.size; ++r) {
    if (r == tc.rank || (!only.empty() && std::find(only.begin(), only.end(), r) == only.end()))
      continue;
    auto& ss = tcp_address(*tc.createPair(r)).getSockaddr();
    card.ip = ip_of(ss);
    card.ports[static_cast<size_t>(r)] = port_of(ss);
  }
  return card;
}

lazy_mesh::lazy_mesh(::gloo::transport::Context& tc, std::shared_ptr<void> owner, int me,
                     std::vector<mesh_card> cards, std::chrono::milliseconds connect_bound)
  : tc_(tc), owner_(std::move(owner)), me_(me), cards_(std::move(cards)), bound_(connect_bound),
    connected_(cards_.size(), 0), rng_(std::random_device{}() ^ static_cast<unsigned>(me)) {
  for (int r = 0; r < me; ++r)
    local_rank_ += cards_[static_cast<size_t>(r)].hostname == cards_[static_cast<size_t>(me)].hostname;
  connected_[static_cast<size_t>(me)] = 1;
}

size_t lazy_mesh::ensure(const std::vector<int>& peers, const std::function<void()>& checkpoint) {
  auto deadline = clock::now() + bound_;
  std::vector<int> accepting;
  size_t made = 0;
  for (int r : peers) {
    {
      std::lock_guard<std::mutex> lk{mu_};
      if (connected_[static_cast<size_t>(r)])
        continue;
    }
    auto& pair = tc_.getPair(r);
    pair->setLocalRank(local_rank_);
    auto& card = cards_[static_cast<size_t>(r)];
    if (!connects(tcp_address(*pair), make_address(card.ip, card.ports[static_cast<size_t>(me_)]))) {
      accepting.push_back(r);
      continue;
    }
    connect_one(r, deadline, checkpoint);
    ++made;
  }
  for (int r : accepting)
    accept_one(r, checkpoint);
  return made;
}

void lazy_mesh::close_unconnected() {
  std::lock_guard<std::mutex> lk{mu_};
  closed_ = true;
  for (int r = 0; r < static_cast<int>(connected_.size()); ++r)
    if (!connected_[static_cast<size_t>(r)])
      tc_.getPair(r)->close();
}

size_t lazy_mesh::connected() const {
  std::lock_guard<std::mutex> lk{mu_};
  return static_cast<size_t>(std::count(connected_.begin(), connected_.end(), 1)) - 1;
}

// Waits for rank `r` to connect to this rank's pair (the peer connects).
void lazy_mesh::accept_one(int r, const std::function<void()>& checkpoint) {
  auto& card = cards_[static_cast<size_t>(r)];
  auto where = readable(card.ip, card.ports[static_cast<size_t>(me_)]);
  if (checkpoint)
    checkpoint();
  try {
    tc_.getPair(r)->connect(make_address(card.ip, card.ports[static_cast<size_t>(me_)]).bytes());
  } catch (const ::gloo::IoException& e) {
    if (checkpoint)
      checkpoint();
    throw mesh_unreachable(r, where,
                           fmt::format("rank {} ({}) never connected from {}: {}", r, card.host,
                                       where, gloo_reason(e.what())));
  }
  if (checkpoint)
    checkpoint(); // close_unconnected() ended the wait
  std::lock_guard<std::mutex> lk{mu_};
  if (closed_)
    throw mesh_unreachable(r, where, "the collectives failed while rank " + std::to_string(r)
                                       + " was connecting");
  connected_[static_cast<size_t>(r)] = 1;
}

// Connects this rank's side of the pair with `r` (this rank connects),
// retrying transient errors with a fresh pair each time.
void lazy_mesh::connect_one(int r, clock::time_point deadline,
                            const std::function<void()>& checkpoint) {
  auto& peer = cards_[static_cast<size_t>(r)];
  auto port = peer.ports[static_cast<size_t>(me_)];
  auto target = make_address(peer.ip, port);
  auto bytes = target.bytes();
  auto pause = std::chrono::duration_cast<std::chrono::milliseconds>(knobs::mesh_retry_first_pause);
  auto t0 = clock::now();
  for (int attempt = 1;; ++attempt) {
    std::string why;
    try {
      tc_.getPair(r)->connect(bytes);
      if (checkpoint)
        checkpoint();
      std::lock_guard<std::mutex> lk{mu_};
      if (!closed_) {
        connected_[static_cast<size_t>(r)] = 1;
        return;
      }
      why = "the collectives failed meanwhile";
    } catch (const ::gloo::IoException& e) {
      why = gloo_reason(e.what());
    }
    std::uniform_int_distribution<int64_t> spread(pause.count() / 2, pause.count() * 3 / 2);
    std::chrono::milliseconds wait{spread(rng_)};
    bool again = transient(why) && attempt < knobs::mesh_connect_attempts
                 && clock::now() + wait < deadline;
    if (again) {
      log::debug("hvd: connecting to rank {} at {} failed ({}), attempt {}; again in {} ms", r,
                 readable(peer.ip, port), why, attempt, wait.count());
      if (checkpoint)
        checkpoint();
      std::this_thread::sleep_for(wait);
      if (checkpoint)
        checkpoint();
      pause = std::min(pause * 2, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    knobs::mesh_retry_longest_pause));
      // A failed pair is closed for good; the peer still listens on its
      // own. A new pair keeps the connecting side unless both ranks share
      // an address (then the ports decide, and a new port may not).
      std::lock_guard<std::mutex> lk{mu_};
      auto timeout = tc_.getTimeout();
      tc_.setTimeout(std::max<std::chrono::milliseconds>(bound_ / 5, std::chrono::seconds{1}));
      auto& fresh = tc_.createPair(r);
      tc_.setTimeout(timeout);
      fresh->setLocalRank(local_rank_);
      again = !closed_ && connects(tcp_address(*fresh), target);
    }
    if (!again)
      throw mesh_unreachable(
        r, readable(peer.ip, port),
        fmt::format("cannot connect to rank {} ({}) at {}: {} ({} attempt{} over {}{})", r,
                    peer.host, readable(peer.ip, port), why, attempt, attempt == 1 ? "" : "s",
                    seconds_since(t0),
                    transient(why) ? "; a transient error is retried until the rendezvous "
                                     "deadline"
                                   : ""));
  }
}

void connect_pairs(::gloo::transport::Context& tc, int me, const std::vector<mesh_card>& cards,
                   std::chrono::steady_clock::time_point deadline) {
  auto bound = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
  lazy_mesh mesh{tc, nullptr, me, cards, std::max(bound, std::chrono::milliseconds{0})};
  std::vector<int> peers;
  for (int k = 1; k < tc.size; ++k)
    peers.push_back((me + k) % tc.size);
  mesh.ensure(peers);
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
