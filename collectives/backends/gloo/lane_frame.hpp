#pragma once

// Internal: how the small-message lane (small_lane.hpp) puts a message on
// the wire. A message starts with a negotiation header whose words change
// little from one exchange to the next on the same link (the sequence
// numbers move on by one, the rest mostly stays), so the header goes as
// the differences from the link's last header, zero runs skipped, and the
// rest of the message (the data) as it is. Between 2 emulated nodes at
// 1 Gbit/s a 1 KiB allreduce is bound by the link's bytes: its 14-word
// header (112 bytes and a length word) took 1,200 bytes a frame where
// Open MPI's took 1,048 (docs/benchmarks/spmd.md); encoded, the header
// takes about 8.
//
// Layout (varints are LEB128, deltas zigzag-coded, words little-endian as
// in memory):
//   varint  length of the message (bytes)
//   varint  header words W (W * 8 <= length)
//   then, until W words are covered: varint `skip` (so many words equal to
//   the last header's), and where words are left, varint delta of the next
//   word (wrapping: word - last)
//   the message's bytes after the header, raw
// Both ends keep the last header per link and direction (`last`): a word
// beyond it counts as 0, and a shorter header leaves its tail as it was.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hvactor::collectives::lane_frame {

/// The most bytes encode() writes for a message of `bytes` bytes (a
/// header of any number of words in it).
size_t max_encoded(size_t bytes);

/// Encodes `msg` (its first `words` 64-bit words a header; `words` * 8 <=
/// msg.size()) into `out` (at least max_encoded(msg.size()) bytes),
/// against `last` (then set to this header); returns the bytes written.
size_t encode(std::span<const std::byte> msg, size_t words, std::vector<int64_t>& last,
              std::byte* out);

/// Decodes a frame from `in` (the receive buffer: a frame that runs past
/// it, a length over `max_length`, or a header over the length is
/// malformed: std::runtime_error) against `last` (then set to its
/// header), writing at most `into.size()` bytes of the message to `into`;
/// returns the message's length (the bytes written: min of both).
size_t decode(std::span<const std::byte> in, size_t max_length, std::vector<int64_t>& last,
              std::span<std::byte> into);

} // namespace hvactor::collectives::lane_frame
