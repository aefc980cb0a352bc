#pragma once

// Test helpers for hvactor::train's byte routes (data_route_test,
// train_progress_test, train_transfer_test): files of known bytes, and an
// upload on the data link that a test may tamper with on the way.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "base/net/data_link.hpp"
#include "train/internal/checkpoint_stream.hpp"

namespace hvactor::test {

/// `size` bytes from a generator seeded with `seed` at `p` (its folders
/// made).
inline void write_file(const std::filesystem::path& p, size_t size, unsigned seed) {
  std::filesystem::create_directories(p.parent_path());
  std::vector<char> bytes(size);
  std::mt19937 rng{seed};
  for (auto& b : bytes)
    b = static_cast<char>(rng());
  std::ofstream{p, std::ios::binary}.write(bytes.data(), static_cast<std::streamsize>(size));
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

/// Streams `dir` as rank 0's checkpoint upload with ticket `t` to the data
/// link at host:port, its chunks passed through `tamper` first; the
/// driver's answer ("" when it took it).
template <class Tamper>
std::string upload_raw(const std::string& host, uint16_t port, const data_link::ticket& t,
                       const std::filesystem::path& dir, Tamper tamper) {
  using namespace std::chrono_literals;
  auto s = data_link::connect(host, port, {}, t, 5s);
  train::checkpoint_source source{dir};
  std::vector<std::vector<char>> chunks;
  while (auto c = source.next())
    chunks.push_back(std::move(*c));
  tamper(chunks);
  for (auto& c : chunks)
    s->write_frame(c.data(), c.size());
  s->write_u64(0);
  std::vector<char> why;
  s->read_frame(why, 1 << 16);
  return {why.begin(), why.end()};
}

} // namespace hvactor::test
