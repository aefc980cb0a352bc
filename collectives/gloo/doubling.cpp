#include "doubling.hpp"

#include <gloo/types.h>

#include "collectives/shm/reduce.hpp"

namespace hvactor::collectives {

namespace {

// Gloo's own algorithms use slot prefixes 0x01-0x08.
constexpr uint8_t doubling_slot_prefix = 0x40;

int power_of_two_below(int n) {
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

} // namespace

std::vector<int> doubling_peers(int rank, int size) {
  std::vector<int> peers;
  int p = power_of_two_below(size);
  if (rank >= p)
    return {rank - p};
  if (rank + p < size)
    peers.push_back(rank + p);
  for (int d = 1; d < p; d *= 2)
    peers.push_back(rank ^ d);
  return peers;
}

void doubling_allreduce(const std::shared_ptr<::gloo::Context>& ctx, void* data, size_t count,
                        hvd::dtype t, hvd::op o, std::vector<std::byte>& scratch, uint32_t tag,
                        std::chrono::milliseconds timeout) {
  int n = ctx->size, me = ctx->rank;
  int p = power_of_two_below(n);
  size_t bytes = count * hvd::size_of(t);
  if (scratch.size() < bytes)
    scratch.resize(bytes);
  auto slot = ::gloo::Slot::build(doubling_slot_prefix, tag);
  auto mine = ctx->createUnboundBuffer(data, bytes);
  auto theirs = ctx->createUnboundBuffer(scratch.data(), bytes);
  // The peer's copy (in scratch) into data, the lower rank's copy first.
  auto fold = [&](int peer) {
    const void* srcs[2] = {data, scratch.data()};
    if (peer < me)
      std::swap(srcs[0], srcs[1]);
    shm::reduce(data, nullptr, srcs, 2, count, t, o);
  };
  if (me >= p) {
    mine->send(me - p, slot);
    mine->waitSend(timeout);
    mine->recv(me - p, slot);
    mine->waitRecv(timeout);
    return;
  }
  if (me + p < n) {
    theirs->recv(me + p, slot);
    theirs->waitRecv(timeout);
    fold(me + p);
  }
  for (int d = 1; d < p; d *= 2) {
    int peer = me ^ d;
    theirs->recv(peer, slot);
    mine->send(peer, slot);
    mine->waitSend(timeout);
    theirs->waitRecv(timeout);
    fold(peer);
  }
  if (me + p < n) {
    mine->send(me + p, slot);
    mine->waitSend(timeout);
  }
}

} // namespace hvactor::collectives
