#include "lane_frame.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hvactor::collectives::lane_frame {

namespace {

constexpr size_t max_varint = 10; // a 64-bit value, 7 bits a byte

std::byte* put(std::byte* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = std::byte(static_cast<uint8_t>(v) | 0x80);
    v >>= 7;
  }
  *out++ = std::byte(static_cast<uint8_t>(v));
  return out;
}

uint64_t zigzag(uint64_t delta) {
  return (delta << 1) ^ (0 - (delta >> 63));
}

uint64_t unzigzag(uint64_t z) {
  return (z >> 1) ^ (0 - (z & 1));
}

[[noreturn]] void malformed(const std::string& what) {
  throw std::runtime_error("small-message lane: a malformed frame (" + what + ")");
}

// Reads varints from a received buffer, never past its end.
struct reader {
  const std::byte* at;
  const std::byte* end;

  uint64_t next() {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (at == end)
        malformed("it runs past the receive buffer");
      auto b = static_cast<uint8_t>(*at++);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0)
        return v;
    }
    malformed("a varint over 10 bytes");
  }
};

} // namespace

size_t max_encoded(size_t bytes) {
  // Two counts, then per word at worst a skip of 0 (1 byte) and a delta
  // of max_varint bytes where the word took 8.
  return 2 * max_varint + bytes + (bytes / sizeof(int64_t)) * (1 + max_varint - sizeof(int64_t));
}

size_t encode(std::span<const std::byte> msg, size_t words, std::vector<int64_t>& last,
              std::byte* out) {
  const size_t header_bytes = words * sizeof(int64_t);
  if (header_bytes > msg.size())
    throw std::invalid_argument("lane_frame::encode: a header of " + std::to_string(words)
                                + " words in a message of " + std::to_string(msg.size())
                                + " bytes");
  std::byte* p = put(out, msg.size());
  p = put(p, words);
  if (last.size() < words)
    last.resize(words, 0);
  size_t skip = 0;
  for (size_t i = 0; i < words; ++i) {
    int64_t w;
    std::memcpy(&w, msg.data() + i * sizeof w, sizeof w);
    if (w == last[i]) {
      ++skip;
      continue;
    }
    p = put(p, skip);
    p = put(p, zigzag(static_cast<uint64_t>(w) - static_cast<uint64_t>(last[i])));
    last[i] = w;
    skip = 0;
  }
  if (skip > 0)
    p = put(p, skip);
  size_t rest = msg.size() - header_bytes;
  if (rest > 0)
    std::memcpy(p, msg.data() + header_bytes, rest);
  return static_cast<size_t>(p - out) + rest;
}

size_t decode(std::span<const std::byte> in, size_t max_length, std::vector<int64_t>& last,
              std::span<std::byte> into) {
  reader r{in.data(), in.data() + in.size()};
  uint64_t length = r.next();
  uint64_t words = r.next();
  if (length > max_length)
    malformed(std::to_string(length) + " bytes, over the lane's " + std::to_string(max_length));
  if (words > length / sizeof(int64_t))
    malformed("a header of " + std::to_string(words) + " words in " + std::to_string(length)
              + " bytes");
  // Decoded in place: a malformed frame fails the lane for good.
  if (last.size() < words)
    last.resize(words, 0);
  for (size_t i = 0; i < words;) {
    uint64_t skip = r.next();
    if (skip > words - i)
      malformed("a skip past the header");
    i += skip;
    if (i == words)
      break;
    last[i] = static_cast<int64_t>(static_cast<uint64_t>(last[i]) + unzigzag(r.next()));
    ++i;
  }
  const size_t header_bytes = words * sizeof(int64_t);
  const size_t rest = length - header_bytes;
  if (rest > static_cast<size_t>(r.end - r.at))
    malformed("its data runs past the receive buffer");
  const size_t n = std::min<size_t>(length, into.size());
  std::memcpy(into.data(), last.data(), std::min(n, header_bytes));
  if (n > header_bytes)
    std::memcpy(into.data() + header_bytes, r.at, n - header_bytes);
  return n;
}

} // namespace hvactor::collectives::lane_frame
