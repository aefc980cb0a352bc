#include "collectives/backends/shm/communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "collectives/backends/binding.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "collectives/backends/shm/reduce.hpp"

namespace hvactor::collectives::shm {

namespace {

using clock_type = std::chrono::steady_clock;

// A cache line: the most a step's data is shifted into its slot.
constexpr size_t line = 64;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// A 64-bit digest of a solo round's header at step `step` (xxHash64's
// round and finalizer), never 0: equal digests stand for equal headers
// (a chance of 2^-64 that two different ones collide). The step goes in,
// so that a digest left from an earlier step never matches this one's.
uint64_t header_digest(const int64_t* header, size_t words, uint32_t step) {
  constexpr uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full,
                     p3 = 0x165667B19E3779F9ull;
  uint64_t h = p3 + step + words;
  for (size_t i = 0; i < words; ++i) {
    uint64_t k = static_cast<uint64_t>(header[i]) * p2;
    k = (k << 31 | k >> 33) * p1;
    h ^= k;
    h = (h << 27 | h >> 37) * p1 + p2;
  }
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h | 1;
}

} // namespace

communicator::communicator(std::shared_ptr<segment> seg, local_group group,
                           std::chrono::milliseconds timeout)
  : seg_(std::move(seg)),
    group_(std::move(group)),
    timeout_(timeout),
    slot_bytes_(seg_->header().slot_bytes),
    room_(slot_bytes_ - line),
    chunk_bytes_(std::min<size_t>(room_, knobs::shm_chunk_bytes)),
    loaded_chunk_bytes_(std::min<size_t>(room_, knobs::shm_loaded_chunk_bytes)),
    oversubscribed_(group_.local_size > first_core_count()),
    spin_(knobs::shm_spin) {
}

void communicator::reset() {
  for (int k = 0; k < group_.local_size; ++k) {
    for (int set : {0, 1}) {
      auto& w = seg_->words(k, set);
      w.posted.store(0);
      w.reduced.store(0);
      w.loaded = w.offset = 0;
    }
    seg_->sleepers(k).posted.store(0);
    seg_->sleepers(k).reduced.store(0);
  }
  seg_->header().abort_why.store(0);
  seg_->header().abort_pid.store(0);
}

void communicator::leave() noexcept {
  // A member's death the colocator reported says more than this rank's
  // failure (which it probably caused): keep it.
  auto current = seg_->header().abort_pid.load();
  for (int k = 0; current != 0 && k < group_.local_size; ++k)
    if (k != group_.local_rank && static_cast<uint32_t>(group_.pids[static_cast<size_t>(k)]) == current)
      return;
  seg_->raise_abort(::getpid(), abort_reason::failed);
}

uint32_t communicator::next_step() {
  if (!broken_.empty())
    throw collective_error(fmt::format("hvd: a shared-memory collective refused on rank {} ({}): "
                                       "an earlier one failed ({}); call hvd::shutdown() and "
                                       "hvd::init() to reconnect",
                                       group_.rank, group_.host, broken_));
  return ++step_;
}

void communicator::allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) {
  buffer_part whole{data, count};
  allreduce(std::span<const buffer_part>(&whole, 1), t, o);
}

void communicator::allreduce(std::span<const buffer_part> parts, hvd::dtype t, hvd::op o) {
  const int n = group_.local_size, me = group_.local_rank;
  const size_t esz = hvd::size_of(t);
  view_.assign(parts, esz);
  const size_t count = view_.bytes() / esz;
  if (count == 0)
    return;
  if (count * esz <= std::min(knobs::shm_small_bytes, chunk_bytes_))
    return allreduce_one_step(count, t, o);
  // Chunks: each rank reduces its slice of the chunk from every rank's
  // copy (reduce-scatter), publishes it, and copies the others'
  // (allgather); the next chunk goes to the other set meanwhile. A chunk is
  // chunk_bytes_; after a step at which some rank's waits were loaded,
  // knobs::shm_loaded_chunk_bytes; after one at which the waits of some
  // rank with more local ranks than cores stalled, a whole slot (every
  // rank reads the same words: the same next chunk; rank_words::loaded).
  // Each rank's data sits in its slot at its buffer's offset from a line
  // (rank_words::offset).
  const char* what = "hvd::allreduce (shared memory)";
  bulk_ = count * esz >= knobs::shm_short_slice_bytes;
  long_waits_ = count * esz >= knobs::shm_long_wait_bytes;
  struct bulk_end {
    bool& on;
    bool& long_waits;
    ~bulk_end() { on = long_waits = false; }
  } at_end{bulk_, long_waits_};
  std::vector<const void*> srcs(static_cast<size_t>(n));
  const size_t align = 64 / esz;
  size_t chunk = chunk_bytes_ / esz;
  bool stalled = false; // this rank's waits at the last step took knobs::shm_stalled_step
  for (size_t off = 0; off < count;) {
    size_t m = std::min(chunk, count - off);
    size_t part = round_up((m + static_cast<size_t>(n) - 1) / static_cast<size_t>(n), align);
    auto lo = [&](int k) { return std::min(static_cast<size_t>(k) * part, m) * esz; };
    auto len = [&](int k) { return std::min(static_cast<size_t>(k + 1) * part, m) * esz - lo(k); };
    uint32_t s = next_step();
    int set = static_cast<int>(s & 1);
    const size_t base = off * esz;
    std::byte* mine = my_data(set, view_.line_offset(base));
    for (int k = 0; k < n; ++k)
      if (k != me && len(k) > 0)
        view_.gather(base + lo(k), len(k), mine + lo(k));
    // This rank's own slice is read in place when it lies in one buffer.
    std::byte* own = view_.contiguous(base + lo(me), len(me));
    if (own == nullptr && len(me) > 0)
      view_.gather(base + lo(me), len(me), mine + lo(me));
    auto posted = clock_type::now();
    seg_->words(me, set).loaded = posted >= loaded_until_ ? 0 : stalled && oversubscribed_ ? 2 : 1;
    publish(word::posted, s);
    wait_all(word::posted, s, what);
    auto waited = clock_type::now() - posted;
    chunk = chunk_after(set) / esz;
    for (int k = 0; k < n; ++k)
      srcs[static_cast<size_t>(k)] = k == me ? (own ? own : mine + lo(me)) : data_of(set, k) + lo(me);
    if (own) {
      reduce(own, mine + lo(me), srcs.data(), n, len(me) / esz, t, o);
    } else {
      reduce(mine + lo(me), nullptr, srcs.data(), n, len(me) / esz, t, o);
      view_.scatter(mine + lo(me), base + lo(me), len(me));
    }
    publish(word::reduced, s);
    auto reduced = clock_type::now();
    wait_all(word::reduced, s, what);
    stalled = waited + (clock_type::now() - reduced) >= knobs::shm_stalled_step;
    for (int k = 0; k < n; ++k)
      if (k != me && len(k) > 0)
        view_.scatter(data_of(set, k) + lo(k), base + lo(k), len(k));
    off += m;
  }
}

// The next chunk of an allreduce, by what the local ranks said at this
// step (of `set`) of their waits (after wait_all(posted): every rank reads
// the same words).
size_t communicator::chunk_after(int set) const {
  uint8_t most = 0;
  for (int k = 0; k < group_.local_size; ++k)
    most = std::max(most, seg_->words(k, set).loaded);
  return most == 0 ? chunk_bytes_ : most == 1 ? loaded_chunk_bytes_ : room_;
}

// This rank's data of a step in `set`, `offset` bytes into its slot (said
// with the post that follows: rank_words::offset).
std::byte* communicator::my_data(int set, size_t offset) {
  auto me = group_.local_rank;
  seg_->words(me, set).offset = static_cast<uint8_t>(offset);
  return seg_->data(set, me) + offset;
}

// Rank k's data of the step in `set` it posted (after waiting for it);
// never past its slot's room, whatever the word holds.
const std::byte* communicator::data_of(int set, int k) const {
  return seg_->data(set, k) + (seg_->words(k, set).offset & (line - 1));
}

communicator::range communicator::slice(size_t count, hvd::dtype t, int k) const {
  const size_t n = static_cast<size_t>(group_.local_size);
  const size_t align = 64 / hvd::size_of(t);
  size_t part = round_up((count + n - 1) / n, align);
  size_t begin = std::min(static_cast<size_t>(k) * part, count);
  return {begin, std::min(begin + part, count) - begin};
}

// The whole buffer's slices, a piece of each per step: a rank copies the
// piece of every other rank's slice into its slot (at that rank's place),
// and reduces its own piece from every slot.
void communicator::reduce_scatter(void* data, size_t count, hvd::dtype t, hvd::op o) {
  std::vector<range> parts;
  for (int k = 0; k < group_.local_size; ++k)
    parts.push_back(slice(count, t, k));
  reduce_scatter(data, parts, t, o);
}

void communicator::reduce_scatter(void* data, std::span<const range> parts, hvd::dtype t,
                                  hvd::op o) {
  const int n = group_.local_size, me = group_.local_rank;
  const size_t esz = hvd::size_of(t);
  const size_t piece = std::max<size_t>(1, chunk_bytes_ / static_cast<size_t>(n) / 64 * 64 / esz);
  auto* base = static_cast<std::byte*>(data);
  size_t longest = 0;
  for (auto& r : parts)
    longest = std::max(longest, r.count);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t from = 0; from < longest; from += piece) {
    auto part = [&](int k) {
      auto r = parts[static_cast<size_t>(k)];
      size_t b = std::min(from, r.count);
      return range{r.begin + b, std::min(piece, r.count - b)};
    };
    uint32_t s = next_step();
    int set = static_cast<int>(s & 1);
    std::byte* mine = my_data(set, reinterpret_cast<uintptr_t>(base) % line);
    for (int k = 0; k < n; ++k)
      if (auto p = part(k); k != me && p.count > 0)
        std::memcpy(mine + static_cast<size_t>(k) * piece * esz, base + p.begin * esz,
                    p.count * esz);
    publish(word::posted, s);
    wait_all(word::posted, s, "hvd::allreduce (shared-memory reduce-scatter)");
    auto p = part(me);
    for (int k = 0; k < n; ++k)
      srcs[static_cast<size_t>(k)] =
        k == me ? static_cast<const void*>(base + p.begin * esz)
                : data_of(set, k) + static_cast<size_t>(me) * piece * esz;
    reduce(base + p.begin * esz, nullptr, srcs.data(), n, p.count, t, o);
  }
}

void communicator::allgather_slices(void* data, size_t count, hvd::dtype t) {
  const size_t esz = hvd::size_of(t);
  std::vector<size_t> bytes, offsets;
  for (int k = 0; k < group_.local_size; ++k) {
    auto r = slice(count, t, k);
    bytes.push_back(r.count * esz);
    offsets.push_back(r.begin * esz);
  }
  auto mine = slice(count, t, group_.local_rank);
  allgatherv(static_cast<std::byte*>(data) + mine.begin * esz, data, bytes, offsets);
}

// Small messages: one step. Every rank reduces all copies in rank order,
// so every rank computes the same bits.
void communicator::allreduce_one_step(size_t count, hvd::dtype t, hvd::op o) {
  const int n = group_.local_size;
  const size_t bytes = count * hvd::size_of(t);
  uint32_t s = next_step();
  int set = static_cast<int>(s & 1);
  view_.gather(0, bytes, seg_->data(set, group_.local_rank));
  seg_->words(group_.local_rank, set).digest = 0; // no header digest (allreduce_with_header)
  publish(word::posted, s);
  wait_all(word::posted, s, "hvd::allreduce (shared memory)");
  const void* srcs[256];
  for (int k = 0; k < n; ++k)
    srcs[k] = seg_->data(set, k);
  if (auto* out = view_.contiguous(0, bytes)) {
    // This rank's own copy from its buffer: its slot's lines may still
    // wait for this core to take them back from the peers that read them
    // two steps ago (publish).
    srcs[group_.local_rank] = out;
    reduce(out, nullptr, srcs, n, count, t, o);
  } else {
    small_.resize(bytes);
    reduce(small_.data(), nullptr, srcs, n, count, t, o);
    view_.scatter(small_.data(), 0, bytes);
  }
}

bool communicator::allreduce_with_header(
  int64_t* header, size_t words, size_t data_word, void* data, size_t count, hvd::dtype t,
  hvd::op o, const std::function<bool(std::span<const int64_t>)>& accept) {
  const int n = group_.local_size;
  const size_t header_bytes = round_up(words * sizeof(int64_t), 64);
  const size_t bytes = count * hvd::size_of(t);
  // The header alone takes the one-step path too (allreduce_one_step):
  // a rank that sends only its header meets this one in the same step.
  if (n > 256 || data_word >= words
      || header_bytes + bytes > std::min(knobs::shm_small_bytes, chunk_bytes_))
    return false;
  header[data_word] = 0;
  uint32_t s = next_step();
  int set = static_cast<int>(s & 1);
  std::byte* mine = seg_->data(set, group_.local_rank);
  auto& my_words = seg_->words(group_.local_rank, set);
  // The header goes to the slot (a peer whose digest differs, or that
  // sent its header alone, reads it there); its digest and small data go
  // to this rank's words line, which every waiter reads anyway.
  std::memcpy(mine, header, words * sizeof(int64_t));
  const bool in_line = bytes <= rank_words::inline_bytes;
  if (in_line && bytes > 0)
    std::memcpy(my_words.inline_data, data, bytes);
  else if (bytes > 0)
    std::memcpy(mine + header_bytes, data, bytes);
  const uint64_t digest = header_digest(header, words, s);
  my_words.digest = digest;
  publish(word::posted, s);
  wait_all(word::posted, s, "hvd::allreduce (shared memory)");
  const void* srcs[256];
  bool same = true; // every rank's header as this one's: the min is this one
  for (int k = 0; k < n && same; ++k)
    same = k == group_.local_rank || seg_->words(k, set).digest == digest;
  // This rank's own header and data come from its buffers, not from the
  // copies it just wrote: those lines may still wait for this core to take
  // them back from the peers that read them two steps ago (publish).
  if (!same) {
    for (int k = 0; k < n; ++k)
      srcs[k] = seg_->data(set, k);
    srcs[group_.local_rank] = header;
    reduce(header, nullptr, srcs, n, words, hvd::dtype::int64, hvd::op::min);
  }
  if (!accept(std::span<const int64_t>(header, words)) || header[data_word] != 0)
    return true;
  for (int k = 0; k < n; ++k)
    srcs[k] = in_line ? static_cast<const void*>(seg_->words(k, set).inline_data)
                      : seg_->data(set, k) + header_bytes;
  srcs[group_.local_rank] = data;
  if (bytes > 0)
    reduce(data, nullptr, srcs, n, count, t, o);
  return true;
}

void communicator::allgatherv(const void* in, void* out, std::span<const size_t> bytes,
                              std::span<const size_t> offsets) {
  const int n = group_.local_size, me = group_.local_rank;
  size_t rounds = 0;
  for (auto b : bytes)
    rounds = std::max(rounds, (b + chunk_bytes_ - 1) / chunk_bytes_);
  auto* dst = static_cast<std::byte*>(out);
  auto* src = static_cast<const std::byte*>(in);
  for (size_t j = 0; j < rounds; ++j) {
    auto piece = [&](int k) {
      size_t b = bytes[static_cast<size_t>(k)];
      size_t from = std::min(j * chunk_bytes_, b);
      return std::pair{from, std::min(from + chunk_bytes_, b) - from};
    };
    uint32_t s = next_step();
    int set = static_cast<int>(s & 1);
    // At the offset its piece has in this rank's output (the peers' when
    // their outputs share its offset from a line).
    if (auto [from, len] = piece(me); len > 0) {
      auto at = reinterpret_cast<uintptr_t>(dst + offsets[static_cast<size_t>(me)] + from);
      std::memcpy(my_data(set, at % line), src + from, len);
    }
    publish(word::posted, s);
    wait_all(word::posted, s, "hvd::allgather (shared memory)");
    for (int k = 0; k < n; ++k)
      if (auto [from, len] = piece(k); k != me && len > 0)
        std::memcpy(dst + offsets[static_cast<size_t>(k)] + from, data_of(set, k), len);
  }
  auto mine = bytes[static_cast<size_t>(me)];
  if (mine > 0 && dst + offsets[static_cast<size_t>(me)] != src)
    std::memmove(dst + offsets[static_cast<size_t>(me)], src, mine);
}

void communicator::broadcast(void* data, size_t bytes, int root) {
  auto* p = static_cast<std::byte*>(data);
  for (size_t from = 0; from < bytes; from += chunk_bytes_) {
    size_t len = std::min(chunk_bytes_, bytes - from);
    uint32_t s = next_step();
    int set = static_cast<int>(s & 1);
    if (group_.local_rank == root)
      std::memcpy(my_data(set, reinterpret_cast<uintptr_t>(p + from) % line), p + from, len);
    publish(word::posted, s);
    wait_all(word::posted, s, "hvd::broadcast (shared memory)");
    if (group_.local_rank != root)
      std::memcpy(p + from, data_of(set, root), len);
  }
}

void communicator::barrier() {
  uint32_t s = next_step();
  publish(word::posted, s);
  wait_all(word::posted, s, "hvd::barrier (shared memory)");
}

} // namespace hvactor::collectives::shm
