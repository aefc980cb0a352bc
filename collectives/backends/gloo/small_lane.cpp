#include "small_lane.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <gloo/common/error.h>

#include "base/net/recv_spin.hpp"

#include "lane_frame.hpp"
#include "peer_addresses.hpp"

namespace hvactor::collectives {

namespace {

// Every link's two buffers use the same slot: one message each way per
// step, read in the order sent.
constexpr int lane_slot = 0x5a1;

} // namespace

struct small_lane::link {
  // Encoded frames (lane_frame.hpp): each says its length, so that a read
  // copies only what was sent (a frame holds up to 64 KiB of data where
  // most steps send a header of a few words).
  std::vector<std::byte> out, in;
  // The last header sent and received on this link.
  std::vector<int64_t> sent, got;
  std::unique_ptr<::gloo::transport::Buffer> send, recv;
};

small_lane::small_lane(std::shared_ptr<void> owner,
                       std::map<int, ::gloo::transport::Pair*> pairs, size_t capacity,
                       std::shared_ptr<peer_abort> abort, std::chrono::milliseconds timeout,
                       std::function<std::string(int)> name_of)
  : owner_(std::move(owner)), capacity_(capacity), abort_(std::move(abort)), timeout_(timeout),
    name_of_(std::move(name_of)) {
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0)
    throw std::system_error(errno, std::generic_category(), "small_lane: eventfd");
  wake_ = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  abort_->on_raise([wake = wake_] {
    uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(*wake, &one, sizeof one);
  });
  for (auto& [peer, pair] : pairs) {
    auto l = std::make_unique<link>();
    pair->setSync(true, false);
    l->out.resize(lane_frame::max_encoded(capacity_));
    l->in.resize(lane_frame::max_encoded(capacity_));
    l->send = pair->createSendBuffer(lane_slot, l->out.data(), l->out.size());
    l->recv = pair->createRecvBuffer(lane_slot, l->in.data(), l->in.size());
    links_.emplace(peer, std::move(l));
  }
}

small_lane::~small_lane() {
  // The buffers go before the pairs (owner_) they belong to.
  links_.clear();
}

small_lane::link& small_lane::of(int peer) {
  auto found = links_.find(peer);
  if (found == links_.end())
    throw ::gloo::Exception("small_lane: no pair with rank " + std::to_string(peer));
  return *found->second;
}

void small_lane::send(link& l, const void* data, size_t bytes, size_t header_words) {
  auto encoded =
    lane_frame::encode(std::span(static_cast<const std::byte*>(data), bytes),
                       std::min(header_words, bytes / sizeof(int64_t)), l.sent, l.out.data());
  l.send->send(0, encoded);
  l.send->waitSend();
}

// At most `bytes` of what the peer sent (the frame's length is the peer's
// word: never more than the capacity, nor past the buffer).
void small_lane::recv(link& l, void* into, size_t bytes) {
  {
    recv_spin::scope spin{lane_spin, *wake_, timeout_};
    l.recv->waitRecv();
  }
  try {
    lane_frame::decode(l.in, capacity_, l.got, std::span(static_cast<std::byte*>(into), bytes));
  } catch (const std::runtime_error& e) {
    // As a failed read: combine() names the peer, the backend fails the
    // operation and announces it.
    throw ::gloo::IoException(e.what());
  }
}

void small_lane::combine(int n, int me, void* data, size_t bytes, size_t header_words,
                         const doubling_fold& fold, const std::function<size_t()>& sending) {
  if (bytes > capacity_)
    throw std::invalid_argument("small_lane: a message of " + std::to_string(bytes)
                                + " bytes is over the lane's " + std::to_string(capacity_));
  abort_->check();
  if (scratch_.size() < bytes)
    scratch_.resize(bytes);
  int at = -1; // the peer of the step in progress, for a failure's text
  doubling_moves moves{
    .send =
      [&](int peer, const void* d) {
        at = peer;
        send(of(peer), d, sending(), header_words);
      },
    .recv =
      [&](int peer, void* into) {
        at = peer;
        recv(of(peer), into, bytes);
      },
    .swap =
      [&](int peer, const void* d, void* into) {
        at = peer;
        auto& l = of(peer);
        send(l, d, sending(), header_words);
        recv(l, into, bytes);
      },
  };
  try {
    doubling_schedule(n, me, data, scratch_.data(), fold, moves);
  } catch (const ::gloo::IoException& e) {
    abort_->check();
    throw ::gloo::IoException(std::string(e.what()) + " (small-message lane with rank "
                              + std::to_string(at) + " " + name_of_(at) + ")");
  }
}

std::unique_ptr<small_lane> connect_small_lane(
  const std::shared_ptr<::gloo::transport::Device>& device, int me, int n,
  const std::string& host, rendezvous_client& client, const std::string& prefix,
  size_t capacity, const std::shared_ptr<peer_abort>& abort, std::chrono::milliseconds timeout,
  std::chrono::milliseconds bound, std::function<std::string(int)> name_of) {
  std::shared_ptr<::gloo::transport::Context> tc = device->createContext(me, n);
  // As abortable_context::connect: a pair waits for its peer's connect up
  // to five times the timeout it was made with.
  tc->setTimeout(std::max(bound / 5, std::chrono::milliseconds{1000}));
  auto peers = doubling_peers(me, n);
  auto cards = exchange_cards(client, prefix + "/lane", me, create_pairs(*tc, host, peers), bound);
  auto mesh = std::make_shared<lazy_mesh>(*tc, tc, me, std::move(cards), bound);
  abort->on_raise([weak = std::weak_ptr<lazy_mesh>(mesh)] {
    if (auto m = weak.lock())
      m->close_unconnected();
  });
  mesh->ensure(peers, [&abort] { abort->check(); });
  std::map<int, ::gloo::transport::Pair*> pairs;
  for (int peer : peers)
    pairs[peer] = tc->getPair(peer).get();
  return std::make_unique<small_lane>(tc, std::move(pairs), capacity, abort, timeout,
                                      std::move(name_of));
}

} // namespace hvactor::collectives
