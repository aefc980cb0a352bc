// hvactor::train's checkpoint stream (train/internal/checkpoint_stream.hpp):
// directories through bounded chunks byte for byte, holes kept, and every
// kind of bad stream refused.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "train/internal/byte_codec.hpp"
#include "train/internal/checkpoint_stream.hpp"

namespace fs = std::filesystem;
using namespace hvactor;

namespace {

struct scratch {
  fs::path path = fs::temp_directory_path() / ("hvactor-ckstream-unit-" + std::to_string(::getpid()));
  scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch() {
    fs::remove_all(path);
  }
};

std::string read_all(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream{p, std::ios::binary} << bytes;
}

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

// Every chunk of `dir` (chunks of at most `chunk` bytes).
std::vector<std::vector<char>> stream(const fs::path& dir, size_t chunk) {
  train::checkpoint_source src{dir, chunk};
  std::vector<std::vector<char>> out;
  while (auto c = src.next()) {
    CHECK(c->size() <= chunk);
    out.push_back(std::move(*c));
  }
  return out;
}

void feed_all(const std::vector<std::vector<char>>& chunks, const fs::path& dir, size_t chunk) {
  train::checkpoint_sink sink{dir, chunk};
  for (auto& c : chunks)
    sink.feed(c);
  if (!sink.complete())
    throw hvactor::error("incomplete");
}

// Every regular file and directory under `dir`, relative, with contents.
std::map<std::string, std::string> tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator{dir}) {
    auto rel = fs::relative(e.path(), dir).generic_string();
    out[rel] = e.is_directory() ? std::string{"<dir>"} : read_all(e.path());
  }
  return out;
}

// A stream written by hand: one file `name` announcing `size` bytes, then
// `data`, then an end record with the right digest and counts.
std::vector<char> hand_stream(const std::string& name, uint64_t size, const std::string& data) {
  byte_writer w;
  w.raw("HVCS", 4);
  w.u32(1);
  w.u8(2);
  w.str(name);
  w.u64(size);
  if (!data.empty()) {
    w.u8(3);
    w.u32(static_cast<uint32_t>(data.size()));
    w.raw(data.data(), data.size());
  }
  auto body = w.take();
  byte_writer e;
  e.u8(4);
  e.u64(1);
  e.u64(size);
  hvactor::sha256_stream d;
  d.update(body);
  e.str(d.finish());
  auto end = e.take();
  body.insert(body.end(), end.begin(), end.end());
  return body;
}

} // namespace

TEST_CASE("checkpoint stream: random trees arrive byte for byte through small chunks") {
  scratch dir;
  std::mt19937 rng{33};
  for (int round = 0; round < 5; ++round) {
    auto src = dir.path / ("src" + std::to_string(round));
    fs::create_directories(src / "a b" / "ñandú ü" / "deep");
    fs::create_directories(src / "empty dir");
    write_file(src / "zero", "");
    write_file(src / "a b" / "zero too", "");
    write_file(src / "top.bin", random_bytes(rng, 1 + rng() % 300'000));
    write_file(src / "a b" / "ñandú ü" / "deep" / "weights 😀.pt", random_bytes(rng, rng() % 200'000));
    for (int k = 0; k < 20; ++k)
      write_file(src / "a b" / ("f" + std::to_string(k)), random_bytes(rng, rng() % 9000));
    size_t chunk = 4096 + rng() % 70'000;
    auto chunks = stream(src, chunk);
    auto out = dir.path / ("out" + std::to_string(round));
    feed_all(chunks, out, chunk);
    CHECK(tree(out) == tree(src));
  }
}

TEST_CASE("checkpoint stream: holes stay holes; a 4 GiB sparse file in a few chunks") {
  scratch dir;
  auto src = dir.path / "src";
  fs::create_directories(src);
  const uint64_t size = uint64_t{4} << 30;
  {
    int fd = ::open((src / "sparse.bin").c_str(), O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, "head", 4, 0) == 4);
    REQUIRE(::pwrite(fd, "middle", 6, static_cast<off_t>(size / 2)) == 6);
    REQUIRE(::pwrite(fd, "tail", 4, static_cast<off_t>(size - 4)) == 4);
    ::close(fd);
  }
  // A trailing hole too.
  { std::ofstream{src / "trailing.bin"} << "x"; }
  fs::resize_file(src / "trailing.bin", 10'000'000);
  auto chunks = stream(src, size_t{4} << 20);
  CHECK(chunks.size() == 1); // the data is a few bytes, the holes their lengths
  auto out = dir.path / "out";
  feed_all(chunks, out, size_t{4} << 20);
  CHECK(fs::file_size(out / "sparse.bin") == size);
  CHECK(fs::file_size(out / "trailing.bin") == 10'000'000);
  int fd = ::open((out / "sparse.bin").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  char buf[6];
  CHECK(::pread(fd, buf, 4, 0) == 4);
  CHECK(std::string(buf, 4) == "head");
  CHECK(::pread(fd, buf, 6, static_cast<off_t>(size / 2)) == 6);
  CHECK(std::string(buf, 6) == "middle");
  CHECK(::pread(fd, buf, 4, static_cast<off_t>(size - 4)) == 4);
  CHECK(std::string(buf, 4) == "tail");
  CHECK(::pread(fd, buf, 4, 1 << 20) == 4);
  CHECK(std::string(buf, 4) == std::string(4, '\0'));
  struct stat st{};
  ::fstat(fd, &st);
  ::close(fd);
  CHECK(st.st_blocks * 512 < (16 << 20)); // still sparse on the driver's disk
}

TEST_CASE("checkpoint stream: bad streams are refused") {
  scratch dir;
  auto ok = hand_stream("w.bin", 5, "12345");
  feed_all({ok}, dir.path / "ok", 1 << 20);
  CHECK(read_all(dir.path / "ok" / "w.bin") == "12345");

  auto refused = [&](const std::vector<std::vector<char>>& chunks, const std::string& why) {
    static int n = 0;
    auto out = dir.path / ("bad" + std::to_string(n++));
    try {
      feed_all(chunks, out, 1 << 20);
      FAIL("accepted a stream that should be refused: " << why);
    } catch (const hvactor::error& e) {
      CHECK_MESSAGE(std::string{e.what()}.find(why) != std::string::npos, std::string{e.what()});
    }
    CHECK(!fs::exists(dir.path / "escape"));
  };
  refused({hand_stream("w.bin", 5, "1234567")}, "more bytes than announced");
  refused({hand_stream("w.bin", 5, "123")}, "ended after 3 of its 5 bytes");
  auto flipped = ok;
  flipped[flipped.size() - 86] ^= 1; // the file's last byte (the end record is 85)
  refused({flipped}, "digest");
  refused({hand_stream("../escape", 1, "x")}, "unsafe path");
  refused({hand_stream("/abs", 1, "x")}, "unsafe path");
  refused({hand_stream("a/../../escape", 1, "x")}, "unsafe path");
  refused({hand_stream("", 1, "x")}, "unsafe path");
  refused({ok, ok}, "after the end");
  refused({std::vector<char>((1 << 20) + 1, 'x')}, "a chunk of");
  refused({std::vector<char>{'N', 'O', 'P', 'E', 1, 0, 0, 0}}, "not hvactor's checkpoint stream");
  // A truncated record is an error too, never an overread.
  refused({std::vector<char>(ok.begin(), ok.begin() + 12)}, "truncated");
  // The sink never writes into a directory that exists.
  CHECK_THROWS_AS(train::checkpoint_sink(dir.path / "ok"), hvactor::error);
  CHECK_THROWS_AS(train::checkpoint_source(dir.path / "missing"), hvactor::error);
}

TEST_CASE("checkpoint stream: a file that shrinks while it is read is an error, not zeros") {
  scratch dir;
  auto src = dir.path / "src";
  fs::create_directories(src);
  write_file(src / "w.bin", std::string(100'000, 'w'));
  train::checkpoint_source source{src, 4096};
  REQUIRE(source.next()); // the header and the first bytes
  fs::resize_file(src / "w.bin", 10);
  CHECK_THROWS_WITH_AS(
    [&] {
      while (source.next()) {
      }
    }(),
    doctest::Contains("became shorter"), hvactor::error);
}

TEST_CASE("copy_checkpoint_dir: byte for byte, holes and permissions kept, links not followed") {
  scratch dir;
  std::mt19937 rng{5};
  auto src = dir.path / "src";
  fs::create_directories(src / "a b" / "ü");
  fs::create_directories(dir.path / "elsewhere");
  write_file(dir.path / "elsewhere" / "secret", "not for the checkpoint");
  write_file(src / "a b" / "ü" / "w.bin", random_bytes(rng, 300'000));
  write_file(src / "private", "p");
  fs::permissions(src / "private", fs::perms::owner_read | fs::perms::owner_write);
  fs::create_directory_symlink(dir.path / "elsewhere", src / "link");
  { std::ofstream{src / "sparse"} << "x"; }
  fs::resize_file(src / "sparse", 64 << 20);
  auto out = dir.path / "out";
  train::copy_checkpoint_dir(src, out);
  CHECK(read_all(out / "a b" / "ü" / "w.bin") == read_all(src / "a b" / "ü" / "w.bin"));
  CHECK(fs::status(out / "private").permissions()
        == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK_FALSE(fs::exists(out / "link"));
  CHECK(fs::file_size(out / "sparse") == (64u << 20));
  struct stat st{};
  REQUIRE(::stat((out / "sparse").c_str(), &st) == 0);
  CHECK(st.st_blocks * 512 < (1 << 20));
  // Into a directory that exists: refused.
  CHECK_THROWS_AS(train::copy_checkpoint_dir(src, out), hvactor::error);
}
