#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

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
/// waits, now or later, throw peer_announced_failure. Gloo's algorithms
/// also wait on buffers of their own (the ring's and bcube's scratch for
/// the reduce-scatter): raise() therefore also fails every pair of the
/// attached context, which wakes those waits with Gloo's IoException
/// (gloo_backend then reports the announcement, check()).
class peer_abort {
public:
  /// The context whose pairs raise() fails (held weakly: the backend owns
  /// it and may drop it while a watch raises).
  void attach(std::weak_ptr<::gloo::Context> ctx);

  /// Wraps Gloo's own buffer for `ptr` (size `bytes`) in `ctx`.
  std::unique_ptr<::gloo::transport::UnboundBuffer>
  buffer(::gloo::Context& ctx, void* ptr, size_t bytes);

  /// From any thread; the first announcement wins.
  void raise(int announcer, int culprit);

  /// raise() for a reason that names no rank.
  void raise(const std::string& reason);

  /// raise() for a reason from the driver that blames `culprit` (-1: none).
  void raise(const std::string& reason, int culprit);

  /// Throws peer_announced_failure once raise() was called.
  void check() const;

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
  std::weak_ptr<::gloo::Context> ctx_;
};

/// The value announced under "<prefix>/failed": "<announcer> <culprit>".
std::string announcement(int announcer, int culprit);

/// Reads announcement()'s text; false for anything else.
bool parse_announcement(const std::string& text, int& announcer, int& culprit);

} // namespace hvactor::collectives
