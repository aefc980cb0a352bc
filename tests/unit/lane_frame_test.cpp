// The small-message lane's frames (collectives/backends/gloo/lane_frame.hpp):
// a negotiation header sent as the differences from the link's last one.
// A run of exchanges as a training loop makes them (sequence numbers moving
// on, a fingerprint changing now and then, data after the header) comes
// back bit for bit, the header in a few bytes; headers that grow and
// shrink, extreme words and a short destination too. A frame that is cut
// short, claims more than the lane carries or skips past its header fails
// with a message and writes nothing past the destination.

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>

#include "collectives/backends/gloo/lane_frame.hpp"

namespace lane_frame = hvactor::collectives::lane_frame;

namespace {

constexpr size_t capacity = 4096;

std::vector<std::byte> message(const std::vector<int64_t>& header, size_t data_bytes,
                               uint8_t fill) {
  std::vector<std::byte> m(header.size() * 8 + data_bytes, std::byte{fill});
  std::memcpy(m.data(), header.data(), header.size() * 8);
  return m;
}

// Encodes with the sender's state, decodes with the receiver's into a
// buffer of `into` bytes; returns the encoded size.
size_t round_trip(const std::vector<std::byte>& msg, size_t words, std::vector<int64_t>& sent,
                  std::vector<int64_t>& got, std::vector<std::byte>& out, size_t into) {
  std::vector<std::byte> wire(lane_frame::max_encoded(msg.size()));
  size_t n = lane_frame::encode(msg, words, sent, wire.data());
  REQUIRE(n <= wire.size());
  out.assign(into, std::byte{0xee});
  auto copied = lane_frame::decode(wire, capacity, got, out);
  CHECK(copied == std::min(into, msg.size()));
  return n;
}

} // namespace

TEST_SUITE("lane frame") {

TEST_CASE("a loop's headers come back whole, each in a few bytes after the first") {
  std::vector<int64_t> sent, got;
  std::vector<std::byte> out;
  std::mt19937_64 rng{7};
  int64_t print = static_cast<int64_t>(rng());
  for (int64_t seq = 1; seq <= 200; ++seq) {
    if (seq % 50 == 0)
      print = static_cast<int64_t>(rng()); // another shape now and then
    std::vector<int64_t> h{seq, -seq, 1, -1, print, -print, 0, 0, -(seq + 1), 2, 0, 0, 0, 0};
    size_t data = seq % 3 == 0 ? 0 : 1024;
    auto msg = message(h, data, static_cast<uint8_t>(seq));
    size_t n = round_trip(msg, h.size(), sent, got, out, msg.size());
    CHECK(out == msg);
    if (seq > 1 && seq % 50 != 0)
      CHECK(n <= data + 12); // the header's 112 bytes and a length word took 120
  }
}

TEST_CASE("headers that grow and shrink stay in step on both ends") {
  std::vector<int64_t> sent, got;
  std::vector<std::byte> out;
  for (size_t words : {3u, 14u, 14u, 200u, 5u, 14u, 0u, 200u, 14u}) {
    CAPTURE(words);
    std::vector<int64_t> h(words);
    for (size_t i = 0; i < words; ++i)
      h[i] = static_cast<int64_t>(i * words) - 7;
    auto msg = message(h, 40, 0x5a);
    round_trip(msg, words, sent, got, out, msg.size());
    CHECK(out == msg);
  }
}

TEST_CASE("extreme words wrap around and a short destination gets the start only") {
  std::vector<int64_t> sent, got;
  std::vector<std::byte> out;
  constexpr auto lo = std::numeric_limits<int64_t>::min();
  constexpr auto hi = std::numeric_limits<int64_t>::max();
  for (auto h : {std::vector<int64_t>{lo, hi, 0, -1}, std::vector<int64_t>{hi, lo, -1, 0},
                 std::vector<int64_t>{lo, lo, lo, lo}}) {
    auto msg = message(h, 16, 0x11);
    round_trip(msg, h.size(), sent, got, out, msg.size());
    CHECK(out == msg);
  }
  std::vector<int64_t> h{1, 2, 3, 4};
  auto msg = message(h, 16, 0x22);
  round_trip(msg, h.size(), sent, got, out, 20); // half a header
  CHECK(std::equal(out.begin(), out.end(), msg.begin()));
  // The receiver still holds the whole header: the next frame decodes.
  h[3] = 9;
  msg = message(h, 16, 0x33);
  round_trip(msg, h.size(), sent, got, out, msg.size());
  CHECK(out == msg);
}

TEST_CASE("a malformed frame fails with a message, writing nothing past the destination") {
  std::vector<int64_t> sent, got;
  std::vector<int64_t> h{5, -5, 1, -1, 123456789, -123456789};
  auto msg = message(h, 64, 0x77);
  std::vector<std::byte> wire(lane_frame::max_encoded(msg.size()));
  size_t n = lane_frame::encode(msg, h.size(), sent, wire.data());
  std::vector<std::byte> into(msg.size() + 16, std::byte{0xee});
  auto dest = std::span(into).first(msg.size());
  auto fails = [&](std::span<const std::byte> frame, size_t max_length, const char* what) {
    CAPTURE(what);
    std::vector<int64_t> state;
    CHECK_THROWS_WITH_AS(lane_frame::decode(frame, max_length, state, dest),
                         doctest::Contains("malformed frame"), std::runtime_error);
    for (size_t i = msg.size(); i < into.size(); ++i)
      REQUIRE(into[i] == std::byte{0xee});
  };
  fails(std::span(wire).first(n - 1), capacity, "cut short in its data");
  fails(std::span(wire).first(1), capacity, "cut short in its counts");
  fails(std::span(wire).first(n), 32, "longer than the lane carries");
  std::vector<std::byte> bad(wire.begin(), wire.begin() + static_cast<std::ptrdiff_t>(n));
  bad[1] = std::byte{0x7f}; // 127 header words in 112 bytes
  fails(bad, capacity, "a header over its length");
  std::vector<std::byte> skip{std::byte{16}, std::byte{2}, std::byte{3}};
  fails(skip, capacity, "a skip past the header");
  std::vector<std::byte> endless(12, std::byte{0xff});
  fails(endless, capacity, "a varint that never ends");
  std::vector<std::byte> huge{std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                              std::byte{0x0f}, std::byte{0}};
  fails(huge, capacity, "a length of 4 GiB");
  // Intact, it decodes.
  std::vector<int64_t> state;
  CHECK(lane_frame::decode(std::span(wire).first(n), capacity, state, dest) == msg.size());
  CHECK(std::equal(dest.begin(), dest.end(), msg.begin()));
}

TEST_CASE("a header longer than the message is refused when encoding") {
  std::vector<int64_t> sent;
  std::vector<std::byte> msg(20), wire(lane_frame::max_encoded(20));
  CHECK_THROWS_AS(lane_frame::encode(msg, 3, sent, wire.data()), std::invalid_argument);
}

} // TEST_SUITE
