#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "collectives/rendezvous/rendezvous_client.hpp"

namespace hvactor::collectives {

/// Thrown out of a Gloo call on this rank when another rank announced that
/// the collectives failed (`announcer` ranks it, blaming `culprit`, -1 for
/// not known), or the elastic driver ended the generation (announcer -1,
/// what() says why).
class peer_announced_failure : public std::runtime_error {
public:
  peer_announced_failure(int announcer, int culprit, const std::string& reason);
  int announcer;
  int culprit;
};

class abortable_buffer;

/// Stops this rank's Gloo calls once a peer announced a failure. Gloo wakes
/// a rank's waits when a peer's connection closes, except one: a send that
/// failed to write (EPIPE) before the pair saw the close stays parked and is
/// never told (tcp::Pair::signalException alerts only the older bound
/// buffers of its transmit queue), so that rank waits out its whole timeout
/// while the others have failed at once. Every buffer hvactor hands Gloo
/// is an abortable_buffer registered here; raise() makes each of their
/// waits, now or later, throw peer_announced_failure. That includes the
/// buffers Gloo's algorithms make for themselves (the ring's and bcube's
/// scratch for the reduce-scatter), whose waits neither a closed pair nor
/// a failed one always wakes (a receive already reading from a peer whose
/// link went down stays parked): an abortable_context makes every buffer.
class peer_abort {
public:
  /// Wraps `inner` (a buffer of Gloo's transport).
  std::unique_ptr<::gloo::transport::UnboundBuffer>
  wrap(std::unique_ptr<::gloo::transport::UnboundBuffer> inner);

  /// From any thread; the first announcement wins.
  void raise(int announcer, int culprit);

  /// raise() for a reason that names no rank.
  void raise(const std::string& reason);

  /// raise() for a reason from the driver that blames `culprit` (-1: none).
  void raise(const std::string& reason, int culprit);

  /// Throws peer_announced_failure once raise() was called.
  void check() const;

  /// `hook` runs once, on the raising thread, after the first raise() (not
  /// under this object's lock), or at once if it was raised already: it
  /// stops waits that are not a buffer's (a pair that waits for its peer to
  /// connect: lazy_mesh; the small-message lane's reads: small_lane).
  /// Hooks add up.
  void on_raise(std::function<void()> hook);

private:
  friend class abortable_buffer;
  void raise(int announcer, int culprit, std::string reason);
  void add(abortable_buffer* b);
  void remove(abortable_buffer* b);

  std::atomic<bool> raised_{false};
  int announcer_ = -1;
  int culprit_ = -1;
  std::string reason_;
  mutable std::mutex mutex_;
  std::vector<abortable_buffer*> live_;
  std::vector<std::function<void()>> hooks_;
};

/// A Gloo context whose every unbound buffer, hvactor's and Gloo's own,
/// `abort` can stop: after connectFullMesh(), buffers are made through a
/// transport context that wraps the connected one's.
class abortable_context : public ::gloo::rendezvous::Context {
public:
  abortable_context(int rank, int size, std::shared_ptr<peer_abort> abort);

  /// rendezvous::Context::connectFullMesh, then the wrapping.
  void connect(::gloo::rendezvous::Store& store,
               std::shared_ptr<::gloo::transport::Device>& device);

  /// A transport context of `device` with every pair made and connected by
  /// `build` (hvactor's own full mesh: peer_addresses.hpp), then the
  /// wrapping. The pairs wait up to `connect_timeout` for a peer to connect
  /// to them; the context's timeout applies afterwards.
  void connect(std::shared_ptr<::gloo::transport::Device>& device,
               std::chrono::milliseconds connect_timeout,
               const std::function<void(::gloo::transport::Context&)>& build);

  /// After the second connect(): the device's transport context itself,
  /// whose pairs a lazy_mesh connects later.
  const std::shared_ptr<::gloo::transport::Context>& transport() const noexcept {
    return raw_;
  }

private:
  std::shared_ptr<peer_abort> abort_;
  std::shared_ptr<::gloo::transport::Context> raw_;
};

/// The first rank whose call fails announces it under "<prefix>/failed";
/// every other rank then stops its Gloo waits at once (`abort` of rank
/// `me` of `size` is raised). So does every rank of an elastic generation
/// that the driver ended because a worker of it failed (it closes the
/// generation's scope, and announcements with it), and every rank of a
/// static job whose driver lost a node (it closes the job's scope) or a
/// rank's process (proto::rank_died_key); the driver names the job's rank:
/// `job_ranks` holds the job rank of each rank of this context, empty
/// when they are the same. Returns the watches (dropping it ends them).
std::shared_ptr<void> watch_failures(rendezvous_client& client, const std::string& prefix,
                                     const std::shared_ptr<peer_abort>& abort, int me, int size,
                                     std::vector<int> job_ranks = {});

/// The value announced under "<prefix>/failed": "<announcer> <culprit>".
std::string announcement(int announcer, int culprit);

/// Reads announcement()'s text; false for anything else.
bool parse_announcement(const std::string& text, int& announcer, int& culprit);

} // namespace hvactor::collectives
