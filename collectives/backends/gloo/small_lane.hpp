#pragma once

// The small-message lane: the negotiation header's exchange across nodes
// (and the small allreduce travelling with it) over Gloo pairs of their
// own, in sync mode, read on the calling thread with a short polling
// window.
//
// Why: over Gloo's ordinary (async) pairs every message is read by Gloo's
// loop thread, which then wakes the waiting thread: two wake-ups per
// message. Between two emulated nodes a 4 B exchange took 50 us that way,
// 17 us with a sync pair (the reader's own blocking recv), and 9 us when
// the reader polls (Gloo's busy-poll mode, which spins until the job's
// timeout: a core per waiting rank). Here the reader polls for a window
// (recv_spin.hpp), then sleeps in poll(); a peer's failure announcement
// wakes it.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gloo/transport/buffer.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>

#include "collectives/rendezvous/rendezvous_client.hpp"

#include "doubling.hpp"
#include "peer_abort.hpp"

namespace hvactor::collectives {

/// How long a lane's read polls before it sleeps: enough for a peer that
/// is in the same step already (a 1 KiB frame across a 1 Gbit/s link is
/// about 10 us), short enough that a peer still computing costs little.
inline constexpr auto lane_spin = std::chrono::microseconds{100};

/// The largest message a lane carries: a header of 896 words with
/// lane_data_bytes of data (doubling.hpp), or a header of up to 8,960
/// words alone. A larger header's exchange (a round with many tensors)
/// goes over Gloo's ordinary pairs (the same choice on every rank: every
/// rank's header has the same words, and a rank carries data over the lane
/// only where its frame fits).
inline constexpr size_t lane_capacity = 896 * sizeof(int64_t) + lane_data_bytes;

class small_lane {
public:
  /// Over `pairs` (peer rank -> a connected pair of a transport context
  /// that `owner` keeps alive), which it switches to sync mode, for
  /// frames of at most `capacity` bytes. `abort` wakes its reads;
  /// `timeout` bounds each; `name_of(peer)` is added to a failure's text
  /// (the address by which the rest of the backend names that peer).
  small_lane(std::shared_ptr<void> owner, std::map<int, ::gloo::transport::Pair*> pairs,
             size_t capacity, std::shared_ptr<peer_abort> abort,
             std::chrono::milliseconds timeout, std::function<std::string(int)> name_of);
  ~small_lane();
  small_lane(const small_lane&) = delete;
  small_lane& operator=(const small_lane&) = delete;

  /// doubling_combine over the lane for rank `me` of `n`: `bytes` (at
  /// most capacity()) at `data`, the peer's copies folded in by `fold`;
  /// each step sends the first `sending()` bytes, its first
  /// `header_words` words as the differences from the last header sent
  /// on that link (lane_frame.hpp), and a read copies what its peer sent
  /// (the peer's copy beyond that is stale). Gloo's exceptions pass
  /// through; peer_announced_failure once `abort` was raised; a malformed
  /// frame fails as a read does (Gloo's IoException, naming the peer).
  void combine(int n, int me, void* data, size_t bytes, size_t header_words,
               const doubling_fold& fold, const std::function<size_t()>& sending);

  size_t capacity() const noexcept {
    return capacity_;
  }

private:
  struct link;
  void send(link& l, const void* data, size_t bytes, size_t header_words);
  void recv(link& l, void* into, size_t bytes);
  link& of(int peer);

  std::shared_ptr<void> owner_;
  size_t capacity_;
  std::shared_ptr<peer_abort> abort_;
  std::chrono::milliseconds timeout_;
  std::function<std::string(int)> name_of_;
  std::map<int, std::unique_ptr<link>> links_;
  // The peer's copy in a step (grown, never shrunk).
  std::vector<std::byte> scratch_;
  // The descriptor abort_ writes to (shared with its hook, which may run
  // after the lane is gone).
  std::shared_ptr<int> wake_;
};

/// The lane of rank `me` of `n` (node `host`): a transport context of
/// `device` with pairs for doubling's peers only, their cards exchanged
/// under "<prefix>/lane" through `client`, connected within `bound`
/// (`abort` stops that too). small_lane's other arguments as above.
std::unique_ptr<small_lane> connect_small_lane(
  const std::shared_ptr<::gloo::transport::Device>& device, int me, int n,
  const std::string& host, rendezvous_client& client, const std::string& prefix,
  size_t capacity, const std::shared_ptr<peer_abort>& abort, std::chrono::milliseconds timeout,
  std::chrono::milliseconds bound, std::function<std::string(int)> name_of);

} // namespace hvactor::collectives
