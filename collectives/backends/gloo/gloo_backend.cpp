#include "gloo_backend.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <regex>
#include <type_traits>

#include <fmt/format.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/transport/tcp/device.h>

#include "doubling.hpp"
#include "gloo_calls.hpp"
#include "mesh_peers.hpp"
#include "collectives/rendezvous/rendezvous_protocol.hpp"
#include "peer_abort.hpp"
#include "peer_addresses.hpp"
#include "small_lane.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "collectives/rendezvous/rendezvous_knobs.hpp"
#include "base/net/net.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives {

namespace {

class gloo_backend : public backend {
public:
  gloo_backend(const topology& topo, rendezvous_client& client, const std::string& prefix,
               const std::string& bind_host, allreduce_algorithm_policy algorithm,
               std::vector<int> job_ranks)
    : topo_(topo), timeout_(client.timeout()),
      // Over a network link gather loses to the ring from smaller sizes.
      algorithm_(net::is_loopback(bind_host) ? algorithm : algorithm.over_network()),
      client_(&client),
      prefix_(prefix), job_ranks_(std::move(job_ranks)) {
    connect(client, prefix, bind_host);
  }

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) override {
    if (count == 0)
      return;
    auto algorithm = algorithm_.choose(count * hvd::size_of(t), topo_.size);
    guarded([&] { return fmt::format("hvd::allreduce ({} x {}, {}, {})", hvd::to_string(t), count,
                                     hvd::to_string(o), to_string(algorithm)); },
            [&] {
              switch (algorithm) {
                case allreduce_algorithm::doubling:
                  need(doubling_peers(topo_.rank, topo_.size));
                  return doubling_allreduce(ctx_, data, count, t, o, gathered_, next_tag(),
                                            timeout_);
                case allreduce_algorithm::gather:
                  need(mesh_peers::ring(topo_.rank, topo_.size));
                  return gloo_calls::gather_allreduce(ctx_, data, count, t, o, gathered_,
                                                      sources_, next_tag(), timeout_);
                case allreduce_algorithm::bcube:
                  need(mesh_peers::all(topo_.rank, topo_.size));
                  return gloo_calls::allreduce(ctx_, data, count, t, o, true, next_tag(),
                                               timeout_);
                case allreduce_algorithm::ring:
                  break;
              }
              need(mesh_peers::ring(topo_.rank, topo_.size));
              gloo_calls::allreduce(ctx_, data, count, t, o, false, next_tag(), timeout_);
            });
  }

  // A small allreduce with the negotiation header in one doubling exchange
  // (the header's words and header_data_bytes more, whatever the data; up
  // to lane_data_bytes where the lane carries the header).
  bool allreduce_with_header(int64_t* header, size_t words, size_t data_word, void* data,
                             size_t count, hvd::dtype t, hvd::op o,
                             const std::function<bool(std::span<const int64_t>)>& accept) override {
    const size_t bytes = count * hvd::size_of(t);
    if (bytes > header_data_bytes && !lane_carries(words, bytes))
      return false;
    header[data_word] = 0;
    header_exchange(header, words, data_word, data, count, t, o);
    if (accept(std::span<const int64_t>(header, words)) && header[data_word] == 0 && bytes > 0)
      std::memcpy(data, frame_.data() + words * sizeof(int64_t), bytes);
    return true;
  }

  void exchange_header(int64_t* header, size_t words, size_t data_word) override {
    header_exchange(header, words, data_word, nullptr, 0, hvd::dtype::int64, hvd::op::min);
  }

  void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                  hvd::dtype t) override {
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (total == 0)
      return;
    guarded([&] { return fmt::format("hvd::allgather ({} x {} in all)", hvd::to_string(t), total); },
            [&] {
              if (algorithm_.doubling_allgather(total * hvd::size_of(t), topo_.size)) {
                std::vector<size_t> bytes(counts.begin(), counts.end());
                for (auto& b : bytes)
                  b *= hvd::size_of(t);
                need(doubling_peers(topo_.rank, topo_.size));
                return doubling_allgatherv(ctx_, in, out, bytes, next_tag(), timeout_);
              }
              need(mesh_peers::ring(topo_.rank, topo_.size));
              gloo_calls::allgatherv(ctx_, in, out, counts, t, next_tag(), timeout_);
            });
  }

  void broadcast(void* data, size_t count, hvd::dtype t, int root) override {
    if (count == 0)
      return;
    guarded([&] { return fmt::format("hvd::broadcast ({} x {}, root {})", hvd::to_string(t),
                                     count, root); },
            [&] {
              need(mesh_peers::broadcast(topo_.rank, topo_.size, root));
              gloo_calls::broadcast(ctx_, data, count, t, root, next_tag(), timeout_);
            });
  }

  void barrier() override {
    guarded([] { return std::string{"hvd::barrier"}; },
            [&] {
              need(mesh_peers::barrier(topo_.rank, topo_.size));
              gloo_calls::barrier(ctx_, next_tag(), timeout_);
            });
  }

  void alltoallv(const void* in, std::span<const int64_t> send_counts, void* out,
                 std::span<const int64_t> recv_counts, hvd::dtype t) override {
    guarded([&] { return fmt::format("hvd::alltoall ({})", hvd::to_string(t)); },
            [&] {
              need(mesh_peers::all(topo_.rank, topo_.size));
              gloo_calls::alltoallv(ctx_, in, send_counts, out, recv_counts, t, next_tag(),
                                    timeout_);
            });
  }

  const char* name() const override {
    return "gloo";
  }

  void interrupt(const std::string& why) override {
    abort_->raise(why);
  }

private:
  uint32_t next_tag() {
    return tag_++;
  }

  // Whether an allreduce of `bytes` (over header_data_bytes) goes with a
  // header of `words` over the lane (doubling.hpp: lane_data_bytes). A
  // header alone then takes the lane too (a smaller frame): same step.
  bool lane_carries(size_t words, size_t bytes) const {
    return lane_ && !algorithm_.forced() && bytes <= lane_data_bytes
           && algorithm_.choose(bytes, topo_.size) != allreduce_algorithm::ring
           && header_frame_bytes(words, bytes) <= lane_->capacity();
  }

  void header_exchange(int64_t* header, size_t words, size_t data_word, const void* data,
                       size_t count, hvd::dtype t, hvd::op o) {
    guarded([] { return std::string{"the negotiation's header exchange"}; },
            [&] {
              auto tag = next_tag();
              auto combine = [&](void* d, size_t bytes, size_t words, const doubling_fold& fold,
                                 const std::function<size_t()>& sending) {
                if (lane_ && bytes <= lane_->capacity())
                  return lane_->combine(topo_.size, topo_.rank, d, bytes, words, fold, sending);
                need(doubling_peers(topo_.rank, topo_.size));
                doubling_combine(ctx_, d, bytes, fold, gathered_, tag, timeout_);
              };
              doubling_header_exchange(combine, header, words, data_word, data, count, t, o,
                                       frame_);
              // The lane comes after a first exchange over the pairs hvd::init
              // connected, which finds a peer that died since (its pairs close).
              if (!lane_)
                lane_ = connect_lane();
            });
  }

  // Every Gloo call goes through here: Gloo's exceptions become one
  // collective_error naming the operation, this rank and the peer.
  template <class Describe, class F>
  void guarded(Describe&& describe, F&& f) {
    if (!broken_.empty())
      throw collective_error(describe() + " refused on rank " + std::to_string(topo_.rank)
                             + ": an earlier operation failed (" + broken_
                             + "); call hvd::shutdown() and hvd::init() to reconnect");
    try {
      f();
      return;
    } catch (const peer_announced_failure& e) {
      fail_announced(describe(), e);
    } catch (const mesh_unreachable& e) {
      fail_mesh(describe(), e);
    } catch (const ::gloo::IoException& e) {
      fail_gloo(describe(), e.what());
    } catch (const ::gloo::EnforceNotMet& e) {
      fail_gloo(describe(), e.what());
    } catch (const ::gloo::Exception& e) {
      fail_gloo(describe(), e.what());
    }
  }

  // Once a failure was announced, the peers close their connections too: a
  // wait may see that close (Gloo's IoException) before its own abort. The
  // announcement is the cause, and names whom to blame.
  [[noreturn]] void fail_gloo(const std::string& what, const std::string& gloo_text) {
    try {
      abort_->check();
    } catch (const peer_announced_failure& e) {
      fail_announced(what, e);
    }
    fail(what, gloo_text);
  }

  // A rank whose collective fails first says whom it blames (in the store,
  // "<prefix>/failed/<rank>"), then closes its connections so that the
  // others fail at once. A rank that sees a peer close on it therefore asks
  // the store first: a peer that announced is alive and passes its blame
  // on; one that did not is the one that died (or stalls).
  [[noreturn]] void fail(const std::string& what, const std::string& gloo_text) {
    int direct = peer_of(gloo_text);
    if (direct < 0) {
      learn_connected();
      direct = peer_of(gloo_text);
    }
    int culprit = blame(direct);
    bool timed_out = gloo_text.find("imed out") != std::string::npos
                     || gloo_text.find("imeout") != std::string::npos;
    auto how = timed_out ? fmt::format("did not answer within {:g} s", timeout_.count() / 1000.0)
                         : std::string{"closed its connection"};
    std::string who;
    if (culprit >= 0 && culprit == direct)
      who = fmt::format("peer rank {} {}", culprit, how);
    else if (culprit >= 0)
      who = fmt::format("peer rank {} failed first ({} saw it and closed its connections)",
                        culprit, direct >= 0 ? "rank " + std::to_string(direct)
                                             : std::string{"another rank"});
    else if (direct >= 0)
      who = fmt::format("rank {} {} after a failure of its own; which rank failed first is not "
                        "known",
                        direct, how);
    else
      who = fmt::format("a peer {}; which rank is not known", how);
    auto msg = fmt::format(
      "{} failed on rank {} of {} ({}): {} [gloo: {}]. {}", what, topo_.rank, topo_.size,
      topo_.host, who, gloo_text,
      "The peer process probably died or stalls; the collectives stay unusable until "
      "hvd::shutdown() and hvd::init()");
    broken_ = gloo_text;
    announce(culprit, true);
    close_and_throw(msg, culprit);
  }

  // This rank stopped waiting because another failed first and said so,
  // or the elastic driver ended the generation after a failure.
  [[noreturn]] void fail_announced(const std::string& what, const peer_announced_failure& e) {
    int culprit = e.culprit != topo_.rank ? e.culprit : -1;
    auto who = e.announcer < 0 ? std::string{e.what()}
               : culprit >= 0
                 ? fmt::format("peer rank {} failed first (rank {} saw it and told every rank)",
                               culprit, e.announcer)
                 : fmt::format("rank {} failed first and told every rank; which rank is at "
                               "fault is not known",
                               e.announcer);
    bool unreachable = e.announcer < 0 && who.find(proto::node_left_the_cluster) != std::string::npos;
    auto msg = fmt::format("{} failed on rank {} of {} ({}): {}. {}", what, topo_.rank, topo_.size,
                           topo_.host, who,
                           unreachable ? "The collectives stay unusable until hvd::shutdown() and "
                                         "hvd::init()"
                                       : "A peer process probably died or stalls; the collectives "
                                         "stay unusable until hvd::shutdown() and hvd::init()");
    broken_ = e.what();
    announce(culprit, false);
    close_and_throw(msg, culprit);
  }

  [[noreturn]] void close_and_throw(const std::string& msg, int culprit) {
    // Closing every connection now makes the ranks that still wait on this
    // one fail at once instead of after their timeout.
    failure_watch_.reset();
    lane_.reset();
    mesh_.reset();
    ctx_.reset();
    throw collective_error(msg, culprit);
  }

  std::string failed_key(int rank) const {
    return prefix_ + "/failed/" + std::to_string(rank);
  }

  // The rank that failed first: the peer whose connection failed, unless it
  // announced a failure of its own (then it is alive); else one that an
  // announcement blames and that did not announce itself; else -1.
  int blame(int direct) {
    if (client_ == nullptr)
      return direct;
    std::map<int, int> announced;
    try {
      auto now = set_now([&](int r) { return failed_key(r); });
      for (int r = 0; r < topo_.size; ++r)
        if (r != topo_.rank && now[static_cast<size_t>(r)])
          announced[r] = std::atoi(now[static_cast<size_t>(r)]->c_str());
    } catch (const std::exception&) {
      return direct; // no store: what this rank saw is all it knows
    }
    if (direct >= 0 && announced.count(direct) == 0)
      return direct;
    for (auto& [r, c] : announced)
      if (c >= 0 && c != topo_.rank && announced.count(c) == 0)
        return c;
    return -1;
  }

  // `first`: this rank saw the failure itself, and tells every rank to stop
  // waiting (watch_failures) besides whom it blames.
  void announce(int culprit, bool first) {
    if (client_ == nullptr)
      return;
    auto text = std::to_string(culprit);
    try {
      client_->set(failed_key(topo_.rank), std::vector<char>(text.begin(), text.end()),
                   knobs::store_round_trip);
      if (first) {
        auto note = announcement(topo_.rank, culprit);
        client_->set(prefix_ + "/failed", std::vector<char>(note.begin(), note.end()),
                     knobs::store_round_trip);
      }
    } catch (const std::exception&) {
      // The peers then blame this rank, which is closing on them: the best
      // they can know without the store.
    }
  }

  // Gloo names a pair by its peer's address, "[host]:port".
  int peer_of(const std::string& text) const {
    static const std::regex address{R"(\[[^\]]+\]:\d+)"};
    for (std::sregex_iterator i{text.begin(), text.end(), address}, end; i != end; ++i) {
      auto found = peers_.find(i->str());
      if (found != peers_.end())
        return found->second;
    }
    return -1;
  }

  // hvactor's own full mesh (peer_addresses.hpp): every rank's card in one
  // request, pairs connected with retries, connected addresses published.
  void connect(rendezvous_client& client, const std::string& prefix,
               const std::string& bind_host) {
    ::gloo::transport::tcp::attr attr;
    auto iface = env::get(env::gloo_iface);
    if (iface && !iface->empty())
      attr.iface = *iface;
    else
      attr.hostname = bind_host;
    try {
      device_ = ::gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw error(fmt::format("hvd::init: cannot bind Gloo's TCP transport to {} on rank {}: {}",
                              iface ? "HOROVOD_GLOO_IFACE=" + *iface : bind_host, topo_.rank,
                              e.what()));
    }
    ctx_ = std::make_shared<abortable_context>(topo_.rank, topo_.size, abort_);
    ctx_->setTimeout(timeout_);
    auto bound = connect_bound();
    // hvd::init connects the pairs of the ring and of recursive doubling
    // (the negotiation's small allreduce): all of them up to 4 ranks; the
    // rest connect on first use (lazy_mesh).
    guarded([&] { return std::string{"hvd::init (Gloo mesh)"}; },
            [&] {
              ctx_->connect(device_, bound, [&](::gloo::transport::Context& tc) {
                auto mine = create_pairs(tc, topo_.host);
                cards_ = exchange_cards(client, prefix, topo_.rank, mine, bound);
                add_peer_addresses(peers_, cards_, {}, topo_.rank);
              });
              mesh_ = std::make_shared<lazy_mesh>(*ctx_->transport(), ctx_->transport(),
                                                  topo_.rank, cards_, bound);
              abort_->on_raise([mesh = std::weak_ptr<lazy_mesh>(mesh_)] {
                if (auto m = mesh.lock())
                  m->close_unconnected();
              });
              auto first = mesh_peers::ring(topo_.rank, topo_.size);
              for (int q : doubling_peers(topo_.rank, topo_.size))
                if (std::find(first.begin(), first.end(), q) == first.end())
                  first.push_back(q);
              need(first, true);
            });
    failure_watch_ = watch_failures(client, prefix_, abort_, topo_.rank, topo_.size, job_ranks_);
  }

  // The small-message lane; a rank that never publishes its card fails
  // the call as a peer that did not answer.
  std::unique_ptr<small_lane> connect_lane() {
    try {
      return connect_small_lane(device_, topo_.rank, topo_.size, topo_.host, *client_, prefix_,
                                lane_capacity, abort_, timeout_, connect_bound(),
                                [this](int r) { return listened_address(cards_, r, topo_.rank); });
    } catch (const rendezvous_timeout& e) {
      throw ::gloo::IoException(std::string{"the small-message lane's rendezvous: "} + e.what());
    }
  }

  // How long connecting a mesh may take.
  std::chrono::milliseconds connect_bound() const {
    return timeout_ + topo_.size * std::chrono::duration_cast<std::chrono::milliseconds>(
                                     knobs::rendezvous_wait_per_rank);
  }

  // Connects the pairs with `peers` not connected yet, and publishes the
  // addresses of this rank's connected pairs when it connected new ones
  // (or `publish`): a peer's failure message may name them.
  void need(const std::vector<int>& peers, bool publish = false) {
    auto abort = abort_;
    if (mesh_->ensure(peers, [&abort] { abort->check(); }) == 0 && !publish)
      return;
    auto pairs = connected_addresses(*ctx_->transport());
    client_->set(pairs_key(topo_.rank), std::vector<char>(pairs.begin(), pairs.end()));
  }

  [[noreturn]] void fail_mesh(const std::string& what, const mesh_unreachable& e) {
    auto msg = fmt::format(
      "{} failed on rank {} of {} ({}): {}. Check that the nodes reach each other at the address "
      "Gloo binds (HOROVOD_GLOO_IFACE, or the node's address)",
      what, topo_.rank, topo_.size, topo_.host, e.what());
    broken_ = e.what();
    announce(e.rank, true);
    close_and_throw(msg, e.rank);
  }

  // The values of key_of(r) for every rank r that are set now (one request).
  template <class KeyOf>
  std::vector<std::optional<std::string>> set_now(KeyOf key_of) {
    std::vector<std::string> keys;
    for (int r = 0; r < topo_.size; ++r)
      keys.push_back(key_of(r));
    return client_->try_get_many(keys);
  }

  std::string pairs_key(int rank) const {
    return prefix_ + "/pairs/" + std::to_string(rank);
  }

  // Learns, once a failure needs it, the addresses by which Gloo names the
  // pairs that peers connected to this rank (each peer published its own).
  void learn_connected() {
    if (client_ == nullptr || learned_connected_ || cards_.empty())
      return;
    learned_connected_ = true;
    try {
      add_peer_addresses(peers_, cards_, set_now([&](int r) { return pairs_key(r); }), topo_.rank);
    } catch (const std::exception&) {
      // No store: the listened addresses are all this rank knows.
    }
  }

  topology topo_;
  std::chrono::milliseconds timeout_;
  allreduce_algorithm_policy algorithm_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<abortable_context> ctx_;
  // Connects ctx_'s pairs as the collectives need them.
  std::shared_ptr<lazy_mesh> mesh_;
  // Shared with the watch's callback, which may run as the backend goes.
  std::shared_ptr<peer_abort> abort_ = std::make_shared<peer_abort>();
  std::shared_ptr<void> failure_watch_;
  std::map<std::string, int> peers_;
  // Every rank's card; peers_ grows from the published pairs (learn_connected).
  std::vector<mesh_card> cards_;
  bool learned_connected_ = false;
  // Outlives the backend (hvd keeps it for the session); asked on failure.
  rendezvous_client* client_ = nullptr;
  std::string prefix_;
  std::vector<int> job_ranks_; // make_gloo_backend's
  uint32_t tag_ = 0;
  std::string broken_;
  // gather_reduce's copies and their addresses (grown, never shrunk).
  std::vector<std::byte> gathered_;
  std::vector<const void*> sources_;
  // The header exchange's message: the header, then its data.
  std::vector<std::byte> frame_;
  // The header exchange's own pairs, made on its first call.
  std::unique_ptr<small_lane> lane_;
};

} // namespace

std::unique_ptr<backend> make_gloo_backend(const topology& topo, rendezvous_client& client,
                                           const std::string& prefix,
                                           const std::string& bind_host,
                                           allreduce_algorithm_policy algorithm,
                                           std::vector<int> job_ranks) {
  return std::make_unique<gloo_backend>(topo, client, prefix, bind_host, algorithm, job_ranks);
}

} // namespace hvactor::collectives
