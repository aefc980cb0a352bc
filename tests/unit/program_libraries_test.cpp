// What travels with a shipped program: its own libraries found by its
// loader, adopted from a node's own disk when the bytes match, and linked
// into one directory per list for the worker's LD_LIBRARY_PATH.

#include "base/internal/program_libraries.hpp"
#include "base/internal/binary_cache.hpp"
#include "base/internal/file_digest.hpp"
#include <hvactor/errors.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include "unit_temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

std::string write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

} // namespace

TEST_SUITE("program_libraries") {

TEST_CASE("this test program's hvactor libraries are listed with their real path and SHA-256, "
          "the C library is not") {
  auto libs = hvactor::program_libraries("/proc/self/exe");
  bool base = false;
  for (auto& lib : libs) {
    CHECK(lib.name.rfind("libc.so", 0) != 0);
    CHECK(fs::path(lib.path).is_absolute());
    CHECK(fs::canonical(lib.path).string() == lib.path);
    CHECK(lib.hash == hvactor::sha256_file(lib.path));
    if (lib.name.rfind("libhvactor_base.so", 0) == 0)
      base = true;
  }
  CHECK(base);
}

TEST_CASE("the ELF reader finds this program's loader and nothing in a script or an empty file") {
  CHECK(hvactor::read_elf_load_info("/proc/self/exe").interpreter.rfind("/", 0) == 0);
  hvactor_test::temp_dir dir;
  auto script = write_file(dir.path / "run.sh", "#!/bin/sh\necho hi\n");
  CHECK(hvactor::read_elf_load_info(script).interpreter.empty());
  CHECK(hvactor::program_libraries(script).empty());
  auto empty = write_file(dir.path / "empty", "");
  CHECK(hvactor::read_elf_load_info(empty).interpreter.empty());
}

TEST_CASE("a FIFO as a program is refused at once instead of blocking") {
  hvactor_test::temp_dir dir;
  auto fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(hvactor::read_elf_load_info(fifo), hvactor::error);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("library names are plain file names") {
  CHECK(hvactor::valid_library_name("libhvactor_base.so.0"));
  CHECK_FALSE(hvactor::valid_library_name(""));
  CHECK_FALSE(hvactor::valid_library_name("../libc.so.6"));
  CHECK_FALSE(hvactor::valid_library_name("a/b.so"));
  CHECK_FALSE(hvactor::valid_library_name(".hidden.so"));
  CHECK_FALSE(hvactor::valid_library_name("lib\nx.so"));
  CHECK_FALSE(hvactor::valid_library_name(std::string(256, 'a')));
}

TEST_CASE("a node adopts its own copy of a library only when the bytes match, and never "
          "blocks on a FIFO") {
  hvactor_test::temp_dir dir;
  hvactor::binary_cache cache((dir.path / "bin").string());
  auto lib = write_file(dir.path / "libx.so.1", "library bytes");
  auto hash = hvactor::sha256_file(lib);
  auto other = write_file(dir.path / "liby.so.1", "other bytes");
  CHECK_FALSE(cache.adopt(hash, other, 1 << 20)); // same path hint, other bytes
  CHECK_FALSE(cache.has(hash));
  CHECK_FALSE(cache.adopt(hash, "libx.so.1", 1 << 20)); // relative: refused
  CHECK_FALSE(cache.adopt(hash, lib, 4));               // over the bound
  auto fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_FALSE(cache.adopt(hash, fifo, 1 << 20));
  CHECK(cache.adopt(hash, lib, 1 << 20));
  CHECK(cache.has(hash));
  CHECK(read_all(cache.path(hash)) == "library bytes");
  CHECK_THROWS_AS(cache.adopt("not-a-hash", lib, 1 << 20), std::invalid_argument);
}

TEST_CASE("a list of cached libraries becomes one directory of links, the same for the same "
          "list") {
  hvactor_test::temp_dir dir;
  hvactor::binary_cache cache((dir.path / "bin").string());
  auto a = write_file(dir.path / "a", "AAA");
  auto b = write_file(dir.path / "b", "BBB");
  std::map<std::string, std::string> libs{{"liba.so.1", hvactor::sha256_file(a)},
                                          {"libb.so.2", hvactor::sha256_file(b)}};
  for (auto& [name, hash] : libs)
    REQUIRE(cache.adopt(hash, (dir.path / (name == "liba.so.1" ? "a" : "b")).string(), 1 << 20));
  auto first = cache.library_dir(libs);
  CHECK(read_all(fs::path(first) / "liba.so.1") == "AAA");
  CHECK(read_all(fs::path(first) / "libb.so.2") == "BBB");
  CHECK(cache.library_dir(libs) == first);
  struct stat st {};
  REQUIRE(::stat(first.c_str(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);
  auto bad = libs;
  bad.emplace("../../evil.so", libs.begin()->second);
  CHECK_THROWS_AS(cache.library_dir(bad), std::invalid_argument);
  auto missing = libs;
  missing.emplace("libc.so.9", std::string(64, 'e'));
  CHECK_THROWS_AS(cache.library_dir(missing), hvactor::error);
}

} // TEST_SUITE
