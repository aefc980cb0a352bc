// hvactor::train's TensorBoard event files (train/internal/event_file.hpp):
// read back record by record, each checksum checked with a CRC-32C of the
// test's own, each Event parsed with protobuf.

#include <sys/stat.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "tensorboard.pb.h"
#include "train/internal/event_file.hpp"
#include "unit_temp_dir.hpp"

namespace fs = std::filesystem;
namespace tb = hvactor::train::tensorboard;

namespace {

// Bit by bit, reflected Castagnoli polynomial: slow and obviously right.
uint32_t crc32c_bitwise(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : bytes) {
    crc ^= c;
    for (int k = 0; k < 8; ++k)
      crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

uint32_t masked(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(s[at + static_cast<size_t>(i)])} << (8 * i);
  return v;
}

// Every record of the file, its checksums checked.
std::vector<tb::Event> read_events(const fs::path& file) {
  std::ifstream in{file, std::ios::binary};
  std::string all{std::istreambuf_iterator<char>{in}, {}};
  std::vector<tb::Event> out;
  size_t at = 0;
  while (at < all.size()) {
    REQUIRE(all.size() - at >= 12);
    auto n = le(all, at, 8);
    CHECK(le(all, at + 8, 4) == masked(crc32c_bitwise(all.substr(at, 8))));
    REQUIRE(all.size() - at - 12 >= n + 4);
    auto data = all.substr(at + 12, n);
    CHECK(le(all, at + 12 + n, 4) == masked(crc32c_bitwise(data)));
    tb::Event ev;
    REQUIRE(ev.ParseFromString(data));
    out.push_back(ev);
    at += 12 + n + 4;
  }
  return out;
}

} // namespace

TEST_SUITE("event_file") {

TEST_CASE("the masked CRC-32C is TFRecord's") {
  // CRC-32C's check value.
  std::string check = "123456789";
  CHECK(crc32c_bitwise(check) == 0xE3069283u);
  CHECK(tb::masked_crc32c(check.data(), check.size()) == masked(0xE3069283u));
  std::string bytes;
  for (int i = 0; i < 100'000; ++i)
    bytes.push_back(static_cast<char>(i * 2654435761u >> 13));
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{4096}, bytes.size()})
    CHECK(tb::masked_crc32c(bytes.data(), n) == masked(crc32c_bitwise(bytes.substr(0, n))));
}

TEST_CASE("a version record, then a scalar per numeric metric at its step") {
  hvactor_test::temp_dir dir{"hvactor-events"};
  fs::path file;
  {
    tb::event_file events{dir.path};
    file = events.path();
    CHECK(file.parent_path() == dir.path);
    CHECK(file.filename().string().starts_with("events.out.tfevents."));
    events.add_scalars(1, 1700000000.25, {{"loss", 0.5}, {"epoch", int64_t{0}}, {"note", "warm"}});
    events.add_scalars(2, 1700000001.5, {{"loss", 0.25}, {"epoch", int64_t{1}}});
  }
  auto evs = read_events(file);
  REQUIRE(evs.size() == 3);
  CHECK(evs[0].file_version() == "brain.Event:2");
  CHECK(evs[0].wall_time() > 1.6e9);
  CHECK(evs[1].step() == 1);
  CHECK(evs[1].wall_time() == doctest::Approx(1700000000.25));
  // The metrics in name order; the text is not a scalar.
  REQUIRE(evs[1].summary().value_size() == 2);
  CHECK(evs[1].summary().value(0).tag() == "epoch");
  CHECK(evs[1].summary().value(0).simple_value() == 0.0f);
  // A 0 is on the wire: TensorBoard reads a Value without it as no scalar.
  CHECK(evs[1].summary().value(0).value_case() == tb::Summary::Value::kSimpleValue);
  CHECK(evs[1].summary().value(1).tag() == "loss");
  CHECK(evs[1].summary().value(1).simple_value() == 0.5f);
  CHECK(evs[2].step() == 2);
  CHECK(evs[2].summary().value(1).simple_value() == 0.25f);
}

TEST_CASE("two files in one directory in the same second do not collide") {
  hvactor_test::temp_dir dir{"hvactor-events"};
  tb::event_file a{dir.path};
  tb::event_file b{dir.path};
  CHECK(a.path() != b.path());
  CHECK(read_events(a.path()).size() == 1);
}

TEST_CASE("a directory it cannot write is an error naming the file") {
  hvactor_test::temp_dir dir{"hvactor-events"};
  CHECK_THROWS_WITH_AS(tb::event_file{dir.path / "missing"},
                       doctest::Contains("cannot create the TensorBoard file"),
                       hvactor::error);
}

} // TEST_SUITE
