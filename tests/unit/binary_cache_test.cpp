// The node's binary cache (content-addressed, verified, private) and the
// address helpers hvactor-node and drivers use.

#include "base/internal/binary_cache.hpp"
#include <hvactor/errors.hpp>
#include "base/internal/file_digest.hpp"
#include "base/net/net.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace {

namespace fs = std::filesystem;

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/hvactor-cache-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

mode_t mode_of(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return st.st_mode & 0777;
}

std::vector<char> payload(size_t n) {
  std::vector<char> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<char>((i * 131 + 7) % 251);
  return out;
}

} // namespace

TEST_SUITE("binary_cache") {
  TEST_CASE("a binary uploaded in chunks becomes visible only after its hash checks out") {
    temp_dir tmp;
    hvactor::binary_cache cache{tmp.path + "/node/bin"};
    CHECK(mode_of(tmp.path + "/node/bin") == 0700);
    auto bytes = payload(3 * 1024 * 1024 + 17);
    auto hash = hvactor::sha256_bytes(bytes);
    CHECK_FALSE(cache.has(hash));
    size_t chunk = 1 << 20;
    for (size_t off = 0; off < bytes.size(); off += chunk) {
      auto n = std::min(chunk, bytes.size() - off);
      cache.write(hash, "job-1", off, std::span<const char>(bytes.data() + off, n));
      CHECK_FALSE(cache.has(hash));
    }
    cache.finish(hash, "job-1");
    REQUIRE(cache.has(hash));
    CHECK(hvactor::sha256_file(cache.path(hash)) == hash);
    CHECK(mode_of(cache.path(hash)) == 0700);
  }

  TEST_CASE("a corrupt upload is refused, named by both hashes, and leaves nothing behind") {
    temp_dir tmp;
    hvactor::binary_cache cache{tmp.path};
    auto bytes = payload(4096);
    auto announced = hvactor::sha256_bytes(payload(4095));
    cache.write(announced, "job-2", 0, bytes);
    try {
      cache.finish(announced, "job-2");
      FAIL("finish accepted a corrupt binary");
    } catch (const hvactor::error& e) {
      std::string text = e.what();
      CHECK(text.find(announced) != std::string::npos);
      CHECK(text.find(hvactor::sha256_bytes(bytes)) != std::string::npos);
    }
    CHECK_FALSE(cache.has(announced));
    CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator{}) == 0);
  }

  TEST_CASE("two uploads of the same binary under different jobs both succeed") {
    temp_dir tmp;
    hvactor::binary_cache cache{tmp.path};
    auto bytes = payload(10000);
    auto hash = hvactor::sha256_bytes(bytes);
    cache.write(hash, "a", 0, bytes);
    cache.write(hash, "b", 0, bytes);
    cache.finish(hash, "a");
    cache.finish(hash, "b");
    CHECK(cache.has(hash));
  }

  TEST_CASE("malformed hashes and upload ids are refused") {
    temp_dir tmp;
    hvactor::binary_cache cache{tmp.path};
    std::vector<char> one{'x'};
    CHECK_THROWS_AS(cache.has("../etc/passwd"), std::invalid_argument);
    CHECK_THROWS_AS(cache.write(std::string(64, 'A'), "j", 0, one), std::invalid_argument);
    CHECK_THROWS_AS(cache.write(std::string(64, 'a'), "../x", 0, one), std::invalid_argument);
  }
}

TEST_SUITE("net") {
  TEST_CASE("HOST:PORT parses, and bad addresses name the option") {
    auto [host, port] = hvactor::net::parse_host_port("10.0.0.1:6380", "--address");
    CHECK(host == "10.0.0.1");
    CHECK(port == 6380);
    auto [h6, p6] = hvactor::net::parse_host_port("[::1]:7", "--address");
    CHECK(h6 == "::1");
    CHECK(p6 == 7);
    for (auto bad : {"10.0.0.1", ":6380", "host:", "host:0", "host:70000", "host:12a"})
      CHECK_THROWS_WITH_AS(hvactor::net::parse_host_port(bad, "--address"),
                           doctest::Contains("--address must be HOST:PORT"),
                           std::invalid_argument);
  }

  TEST_CASE("loopback and wildcard addresses are recognised") {
    using namespace hvactor::net;
    CHECK(is_loopback("127.0.0.1"));
    CHECK(is_loopback("127.3.2.1"));
    CHECK(is_loopback("localhost"));
    CHECK(is_loopback("::1"));
    CHECK_FALSE(is_loopback("10.0.0.1"));
    CHECK(is_wildcard("0.0.0.0"));
    CHECK(is_wildcard("::"));
    CHECK_FALSE(is_wildcard("127.0.0.1"));
    CHECK(local_address_towards("127.0.0.1") == "127.0.0.1");
  }
}
