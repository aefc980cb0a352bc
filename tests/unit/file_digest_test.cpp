// SHA-256 of files and byte ranges: a published test vector, a file larger
// than the 1 MiB read chunk, and the error for a missing file.

#include <hvactor/errors.hpp>
#include "base/internal/file_digest.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

/// A fresh directory under /tmp, removed with everything in it.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/hvactor-digest-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out{path, std::ios::binary};
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

} // namespace

TEST_SUITE("file_digest") {

TEST_CASE("sha256 of known inputs matches the published vectors") {
  std::string abc = "abc";
  CHECK(hvactor::sha256_bytes(abc)
        == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hvactor::sha256_bytes({})
        == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  temp_dir tmp;
  write_file(tmp.path + "/abc", {'a', 'b', 'c'});
  CHECK(hvactor::sha256_file(tmp.path + "/abc")
        == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("a file larger than one read chunk hashes like its bytes") {
  std::vector<char> bytes(3 * 1024 * 1024 + 17);
  uint32_t x = 12345;
  for (auto& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<char>(x >> 24);
  }
  temp_dir tmp;
  write_file(tmp.path + "/blob", bytes);
  auto digest = hvactor::sha256_file(tmp.path + "/blob");
  CHECK(digest.size() == 64);
  CHECK(digest == hvactor::sha256_bytes(bytes));
  bytes.back() ^= 1;
  CHECK(digest != hvactor::sha256_bytes(bytes));
}

TEST_CASE("a missing file throws hvactor::error naming it and the reason") {
  temp_dir tmp;
  auto path = tmp.path + "/missing.bin";
  auto expected = path + ": cannot open: No such file or directory";
  CHECK_THROWS_WITH_AS(hvactor::sha256_file(path), doctest::Contains(expected.c_str()),
                       hvactor::error);
  CHECK_THROWS_WITH_AS(hvactor::sha256_file(tmp.path),
                       doctest::Contains("Is a directory"), hvactor::error);
}

} // TEST_SUITE
