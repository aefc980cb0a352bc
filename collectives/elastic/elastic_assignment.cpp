#include "collectives/elastic/elastic_assignment.hpp"

#include <array>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

namespace hvactor::elastic_protocol {

namespace {

constexpr char tag_assigned = 1;
constexpr char tag_removed = 2;
constexpr size_t assigned_bytes = 1 + 6 * 4;

void put(std::vector<char>& out, int32_t v) {
  auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

int32_t get(std::span<const char> in, size_t at) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i)
    u |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + static_cast<size_t>(i)]))
         << (8 * i);
  return static_cast<int32_t>(u);
}

} // namespace

assignment removal() {
  assignment gone;
  gone.removed = true;
  return gone;
}

std::string assign_key(const std::string& worker, int generation) {
  return fmt::format("assign/{}/{}", worker, generation);
}

std::string latest_key(const std::string& worker) {
  return "latest/" + worker;
}

std::string joined_key(int generation, const std::string& worker) {
  return fmt::format("joined/{}/{}", generation, worker);
}

std::string changed_key(int generation) {
  return fmt::format("changed/{}", generation);
}

std::string reset_key(int generation) {
  return fmt::format("reset/{}", generation);
}

std::vector<char> encode(const assignment& a) {
  if (a.removed)
    return {tag_removed};
  std::vector<char> out{tag_assigned};
  out.reserve(assigned_bytes);
  for (int32_t v : {a.rank, a.size, a.local_rank, a.local_size, a.cross_rank, a.cross_size})
    put(out, v);
  return out;
}

assignment decode(std::span<const char> bytes) {
  if (bytes.size() == 1 && bytes[0] == tag_removed)
    return removal();
  if (bytes.size() != assigned_bytes || bytes[0] != tag_assigned)
    throw error(fmt::format("hvd::init: malformed elastic assignment ({} bytes, tag {})",
                            bytes.size(), bytes.empty() ? -1 : static_cast<int>(bytes[0])));
  assignment a;
  std::array<int32_t*, 6> fields{&a.rank,       &a.size,       &a.local_rank,
                                 &a.local_size, &a.cross_rank, &a.cross_size};
  for (size_t i = 0; i < fields.size(); ++i)
    *fields[i] = get(bytes, 1 + 4 * i);
  auto within = [](int32_t r, int32_t n) { return n >= 1 && r >= 0 && r < n; };
  if (!within(a.rank, a.size) || !within(a.local_rank, a.local_size)
      || !within(a.cross_rank, a.cross_size) || a.local_size > a.size || a.cross_size > a.size)
    throw error(fmt::format("hvd::init: elastic assignment out of range: rank {} of {}, local "
                            "{} of {}, cross {} of {}",
                            a.rank, a.size, a.local_rank, a.local_size, a.cross_rank,
                            a.cross_size));
  return a;
}

} // namespace hvactor::elastic_protocol
