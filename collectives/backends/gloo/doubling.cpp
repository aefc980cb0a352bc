#include "doubling.hpp"

#include <algorithm>
#include <cstring>

#include <gloo/types.h>

#include "collectives/backends/shm/reduce.hpp"

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

void doubling_schedule(int n, int me, void* data, void* scratch, const doubling_fold& fold,
                       const doubling_moves& moves) {
  int p = power_of_two_below(n);
  if (me >= p) {
    moves.send(me - p, data);
    moves.recv(me - p, data);
    return;
  }
  if (me + p < n) {
    moves.recv(me + p, scratch);
    fold(scratch, false);
  }
  for (int d = 1; d < p; d *= 2) {
    int peer = me ^ d;
    moves.swap(peer, data, scratch);
    fold(scratch, peer < me);
  }
  if (me + p < n)
    moves.send(me + p, data);
}

void doubling_combine(const std::shared_ptr<::gloo::Context>& ctx, void* data, size_t bytes,
                      const doubling_fold& fold, std::vector<std::byte>& scratch, uint32_t tag,
                      std::chrono::milliseconds timeout) {
  if (scratch.size() < bytes)
    scratch.resize(bytes);
  auto slot = ::gloo::Slot::build(doubling_slot_prefix, tag);
  auto mine = ctx->createUnboundBuffer(data, bytes);
  auto theirs = ctx->createUnboundBuffer(scratch.data(), bytes);
  doubling_moves moves{
    .send =
      [&](int peer, const void*) {
        mine->send(peer, slot);
        mine->waitSend(timeout);
      },
    .recv =
      [&](int peer, void* into) {
        auto& buf = into == data ? mine : theirs;
        buf->recv(peer, slot);
        buf->waitRecv(timeout);
      },
    .swap =
      [&](int peer, const void*, void*) {
        theirs->recv(peer, slot);
        mine->send(peer, slot);
        mine->waitSend(timeout);
        theirs->waitRecv(timeout);
      },
  };
  doubling_schedule(ctx->size, ctx->rank, data, scratch.data(), fold, moves);
}

void doubling_allreduce(const std::shared_ptr<::gloo::Context>& ctx, void* data, size_t count,
                        hvd::dtype t, hvd::op o, std::vector<std::byte>& scratch, uint32_t tag,
                        std::chrono::milliseconds timeout) {
  // The peer's copy into data, the lower rank's copy first.
  auto fold = [&](const void* theirs, bool theirs_lower) {
    const void* srcs[2] = {data, theirs};
    if (theirs_lower)
      std::swap(srcs[0], srcs[1]);
    shm::reduce(data, nullptr, srcs, 2, count, t, o);
  };
  doubling_combine(ctx, data, count * hvd::size_of(t), fold, scratch, tag, timeout);
}

void doubling_header_exchange(const doubling_combiner& combine, int64_t* header, size_t words,
                              size_t data_word, const void* data, size_t count, hvd::dtype t,
                              hvd::op o, std::vector<std::byte>& frame) {
  const size_t header_bytes = words * sizeof(int64_t);
  const size_t bytes = data ? count * hvd::size_of(t) : 0;
  // Written whole (no zeroing first): up to 64 KiB of data on the lane.
  frame.resize(header_frame_bytes(words, bytes));
  std::memcpy(frame.data(), header, header_bytes);
  if (bytes > 0)
    std::memcpy(frame.data() + header_bytes, data, bytes);
  std::memset(frame.data() + header_bytes + bytes, 0, frame.size() - header_bytes - bytes);
  auto fold = [&](const void* theirs, bool theirs_lower) {
    auto* h = reinterpret_cast<int64_t*>(frame.data());
    const auto* p = static_cast<const int64_t*>(theirs);
    bool both_carry = h[data_word] == 0 && p[data_word] == 0;
    for (size_t w = 0; w < words; ++w)
      h[w] = std::min(h[w], p[w]);
    if (!both_carry || bytes == 0)
      return;
    void* mine = frame.data() + header_bytes;
    const void* srcs[2] = {mine, static_cast<const std::byte*>(theirs) + header_bytes};
    if (theirs_lower)
      std::swap(srcs[0], srcs[1]);
    shm::reduce(mine, nullptr, srcs, 2, count, t, o);
  };
  auto sending = [&] {
    auto* h = reinterpret_cast<const int64_t*>(frame.data());
    return header_bytes + (h[data_word] == 0 ? bytes : 0);
  };
  combine(frame.data(), frame.size(), words, fold, sending);
  std::memcpy(header, frame.data(), header_bytes);
}

void doubling_allgatherv(const std::shared_ptr<::gloo::Context>& ctx, const void* in, void* out,
                         std::span<const size_t> bytes, uint32_t tag,
                         std::chrono::milliseconds timeout) {
  int n = ctx->size, me = ctx->rank;
  int p = power_of_two_below(n);
  std::vector<size_t> at(static_cast<size_t>(n) + 1, 0);
  for (size_t r = 0; r < static_cast<size_t>(n); ++r)
    at[r + 1] = at[r] + bytes[r];
  auto* base = static_cast<char*>(out);
  auto mine = static_cast<size_t>(me);
  if (bytes[mine] > 0 && in != base + at[mine])
    std::memmove(base + at[mine], in, bytes[mine]);
  if (at.back() == 0 || n == 1)
    return;
  auto buf = ctx->createUnboundBuffer(base, at.back());
  auto slot = ::gloo::Slot::build(doubling_slot_prefix, tag);
  int pending_sends = 0, pending_recvs = 0;
  // The blocks of ranks [lo, hi) (clamped to n), to or from `peer`; empty
  // ones are skipped on both sides (every rank knows every size).
  auto move = [&](bool send, int peer, int lo, int hi, uint8_t k) {
    auto from = at[static_cast<size_t>(std::min(lo, n))];
    auto len = at[static_cast<size_t>(std::min(hi, n))] - from;
    if (len == 0)
      return;
    if (send) {
      buf->send(peer, slot + k, from, len);
      ++pending_sends;
    } else {
      buf->recv(peer, slot + k, from, len);
      ++pending_recvs;
    }
  };
  auto wait = [&] {
    for (; pending_sends > 0; --pending_sends)
      buf->waitSend(timeout);
    for (; pending_recvs > 0; --pending_recvs)
      buf->waitRecv(timeout);
  };
  if (me >= p) {
    move(true, me - p, me, me + 1, 0);
    wait();
    move(false, me - p, 0, n, 1);
    wait();
    return;
  }
  if (me + p < n) {
    move(false, me + p, me + p, me + p + 1, 0);
    wait();
  }
  // After the step for distance d, this rank holds the blocks of its
  // aligned group of 2d ranks below p and of their partners past p.
  for (int d = 1; d < p; d *= 2) {
    int peer = me ^ d;
    int ours = me & ~(d - 1), theirs = peer & ~(d - 1);
    move(false, peer, theirs, theirs + d, 2);
    move(false, peer, theirs + p, theirs + d + p, 3);
    move(true, peer, ours, ours + d, 2);
    move(true, peer, ours + p, ours + d + p, 3);
    wait();
  }
  if (me + p < n) {
    move(true, me + p, 0, n, 1);
    wait();
  }
}

} // namespace hvactor::collectives
