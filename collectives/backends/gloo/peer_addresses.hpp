#pragma once

// Gloo's full mesh, built by hvactor instead of connectFullMesh: what each
// rank publishes (its card), how the pairs connect (retrying transient
// errors, staggered), and the addresses by which Gloo's messages name each
// peer afterwards.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/transport/context.h>

#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::collectives {

/// What one rank publishes for the mesh, once: where each of its pairs
/// listens. Every pair of a Gloo TCP device binds the device's address, so
/// one address and a port per peer say it all (connectFullMesh publishes a
/// 136-byte address per peer and makes every rank read every rank's list,
/// and one more key per rank for its hostname: O(N) requests and N^2 bytes
/// per rank).
struct mesh_card {
  /// The rank's node (topology::host), for messages.
  std::string host;
  /// gethostname(): Gloo's pairs count local ranks by it.
  std::string hostname;
  /// The numeric address every pair listens on (v4 or v6).
  std::string ip;
  /// ports[r]: the port of the pair for rank r; 0 for the rank itself.
  std::vector<int> ports;
};

std::string encode(const mesh_card& card);

/// Throws std::invalid_argument for text that is not a card of `size` ports.
mesh_card decode_card(const std::string& text, int size);

/// Publishes `mine` (rank `me`'s card) under "<prefix>/mesh/<me>" and
/// returns every rank's, waiting up to `bound` for them; a rank that never
/// publishes is named in the rendezvous_timeout thrown.
std::vector<mesh_card> exchange_cards(rendezvous_client& client, const std::string& prefix, int me,
                                      const mesh_card& mine, std::chrono::milliseconds bound);

/// Creates this rank's pairs in `tc` (one per peer, each listening; only
/// with the ranks in `only` when it is not empty: the others' ports are 0)
/// and returns its card.
mesh_card create_pairs(::gloo::transport::Context& tc, const std::string& host,
                       const std::vector<int>& only = {});

/// A pair that could not be connected: `rank` is the peer.
class mesh_unreachable : public std::runtime_error {
public:
  mesh_unreachable(int rank, std::string address, const std::string& what)
    : std::runtime_error(what), rank(rank), address(std::move(address)) {}
  int rank;
  std::string address;
};

/// Gloo's pairs of one rank, connected when a collective first needs them
/// (hvd::init connects none): a ring allreduce needs 2 of them, recursive
/// doubling log2(n), a broadcast's tree and the barrier about log2(n),
/// only alltoall and bcube all n - 1 (mesh_peers.hpp). So a job of n ranks
/// makes O(n log n) connections instead of the full mesh's n(n - 1)/2 (8,128
/// at 128 ranks: 8.3 s of its rendezvous on 2 cores), and an elastic reset
/// as few. Every rank calls ensure() for an operation with the peers that
/// operation talks to, a symmetric relation, so that each pair's two ends
/// connect in the same operation. Not thread-safe except
/// close_unconnected().
class lazy_mesh {
public:
  /// `tc`: the context create_pairs() filled, kept alive by `owner`;
  /// `cards`: every rank's. A pair whose peer never connects fails after
  /// `connect_bound`.
  lazy_mesh(::gloo::transport::Context& tc, std::shared_ptr<void> owner, int me,
            std::vector<mesh_card> cards, std::chrono::milliseconds connect_bound);

  /// Connects the pairs with `peers` not connected yet: this rank
  /// connects to those whose address compares smaller (Gloo's rule), in
  /// the order given, retrying transient errors (knobs::mesh_*) for up to
  /// the bound, then waits for the others to connect to it. `checkpoint`
  /// runs between attempts and around each wait, and throws to stop (a
  /// peer announced a failure). Returns how many pairs this rank
  /// connected (not those it accepted). Throws mesh_unreachable naming the
  /// peer.
  size_t ensure(const std::vector<int>& peers, const std::function<void()>& checkpoint = {});

  /// From any thread: closes every pair not connected yet, so that a wait
  /// of ensure() returns at once (and its checkpoint throws); later
  /// ensure() calls fail.
  void close_unconnected();

  /// The pairs connected so far.
  size_t connected() const;

private:
  void connect_one(int r, std::chrono::steady_clock::time_point deadline,
                   const std::function<void()>& checkpoint);
  void accept_one(int r, const std::function<void()>& checkpoint);
  ::gloo::transport::Context& tc_;
  std::shared_ptr<void> owner_;
  int me_;
  int local_rank_ = 0;
  std::vector<mesh_card> cards_;
  std::chrono::milliseconds bound_;
  // Guards connected_, closed_ and the replacement of a pair (a retry)
  // against close_unconnected().
  mutable std::mutex mu_;
  std::vector<char> connected_;
  bool closed_ = false;
  std::mt19937 rng_;
};

/// Connects every pair of `tc` (rank `me`) to the peers `cards` describe.
/// The side with the larger address connects, the other accepts (Gloo's
/// rule). This rank connects first, to its peers in the order me+1, me+2,
/// ... (so that at each step every rank is the target of one other, not
/// all of them at rank 0), then waits for the pairs that its peers connect.
/// A transient connect error is retried (knobs::mesh_*), never past
/// `deadline`; when a pair still fails, throws mesh_unreachable naming the
/// peer, its address, the error and the attempts made.
void connect_pairs(::gloo::transport::Context& tc, int me, const std::vector<mesh_card>& cards,
                   std::chrono::steady_clock::time_point deadline);

/// The address of rank `r`'s pair for rank `me`, as Gloo prints it.
std::string listened_address(const std::vector<mesh_card>& cards, int r, int me);

/// The text this rank publishes under "<prefix>/pairs/<rank>" once
/// connected: line r holds the local address of its pair with rank r.
std::string connected_addresses(::gloo::transport::Context& tc);

/// Adds to `peers` the addresses by which Gloo names each peer's pair
/// towards `me`: the one it listened on (its card), and the one its socket
/// has once connected (line `me` of its published pairs, in `published`;
/// missing or empty entries are skipped).
void add_peer_addresses(std::map<std::string, int>& peers, const std::vector<mesh_card>& cards,
                        const std::vector<std::optional<std::string>>& published, int me);

} // namespace hvactor::collectives
