// Directories named from the environment: a component cannot climb, and a
// run removes only the directory it made, never through a link put in its
// place.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "base/internal/owned_dir.hpp"

namespace fs = std::filesystem;

namespace {

// A scratch directory for one test case, removed at the end.
struct scratch {
  fs::path path;
  scratch() {
    std::string pattern = (fs::temp_directory_path() / "hvactor-owned-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void touch(const fs::path& p) {
  std::ofstream{p} << "keep";
}

} // namespace

TEST_SUITE("owned directories") {

TEST_CASE("child_path refuses a component that is empty, '.', or holds '..', '/' or NUL") {
  CHECK(hvactor::child_path("/base", "slurm-42", "x") == "/base/slurm-42");
  CHECK(hvactor::child_path("/base", ".hvactor", "x") == "/base/.hvactor");
  for (std::string bad : {std::string{}, std::string{"."}, std::string{".."}, std::string{"a/b"},
                          std::string{"slurm-1/../../victim"}, std::string{"a..b"},
                          std::string{"a\0b", 3}, std::string(256, 'n')}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(hvactor::child_path("/base", bad, "the work dir"),
                         doctest::Contains("the work dir '"), std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(hvactor::child_path("/home/u/.hvactor", "slurm-1/../../victim", "the dir"),
                       doctest::Contains("contains '..'"), std::invalid_argument);
}

TEST_CASE("a directory made by a run is removed with its contents, and the parents it created "
          "when empty; existing parents stay") {
  scratch s;
  fs::create_directory(s.path / "existing");
  touch(s.path / "existing" / "sibling");
  std::string made;
  {
    auto d = hvactor::owned_dir::make(s.path.string(), {"existing", "new", "leaf"}, "test dir");
    made = d.path();
    CHECK(made == (s.path / "existing" / "new" / "leaf").string());
    struct stat st {};
    REQUIRE(::stat(made.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    fs::create_directories(fs::path{made} / "bin");
    touch(fs::path{made} / "bin" / "program");
  }
  CHECK_FALSE(fs::exists(made));
  CHECK_FALSE(fs::exists(s.path / "existing" / "new"));
  CHECK(fs::exists(s.path / "existing" / "sibling"));
}

TEST_CASE("an existing leaf is refused, not adopted, and is left as it was") {
  scratch s;
  fs::create_directories(s.path / "p" / "leaf");
  touch(s.path / "p" / "leaf" / "data");
  CHECK_THROWS_WITH_AS(hvactor::owned_dir::make(s.path.string(), {"p", "leaf"}, "the TLS dir"),
                       doctest::Contains("exists already"), hvactor::error);
  CHECK(fs::exists(s.path / "p" / "leaf" / "data"));
}

TEST_CASE("a leaf ending in XXXXXX is made unique, so two runs of one job never share it") {
  scratch s;
  auto a = hvactor::owned_dir::make(s.path.string(), {"slurm-42.XXXXXX"}, "dir");
  auto b = hvactor::owned_dir::make(s.path.string(), {"slurm-42.XXXXXX"}, "dir");
  CHECK(a.path() != b.path());
  CHECK(fs::path{a.path()}.filename().string().rfind("slurm-42.", 0) == 0);
  a.remove();
  CHECK_FALSE(fs::exists(a.path().empty() ? s.path / "gone" : fs::path{a.path()}));
  CHECK(fs::is_directory(b.path()));
}

TEST_CASE("a leaf replaced by a link to another directory is not followed: the other directory "
          "survives; nor is a file in its place removed") {
  scratch s;
  fs::create_directory(s.path / "victim");
  touch(s.path / "victim" / "precious");
  auto d = hvactor::owned_dir::make(s.path.string(), {"run"}, "dir");
  fs::remove_all(d.path());
  fs::create_directory_symlink(s.path / "victim", d.path());
  d.remove();
  CHECK(fs::exists(s.path / "victim" / "precious"));
  // Nor is a file put in its place removed.
  auto e = hvactor::owned_dir::make(s.path.string(), {"run2"}, "dir");
  fs::remove(e.path());
  touch(e.path());
  e.remove();
  CHECK(fs::exists(s.path / "run2"));
}

TEST_CASE("a component that could climb is refused before anything is created") {
  scratch s;
  CHECK_THROWS_AS(hvactor::owned_dir::make(s.path.string(), {"slurm-1/../../victim"}, "dir"),
                  std::invalid_argument);
  CHECK_THROWS_AS(hvactor::owned_dir::make(s.path.string(), {"a", ".."}, "dir"),
                  std::invalid_argument);
  CHECK(fs::is_empty(s.path));
}

TEST_CASE("an existing parent owned by another user is refused (root only: it needs chown)") {
  if (::geteuid() != 0)
    return;
  scratch s;
  fs::create_directory(s.path / "hvactor-0");
  REQUIRE(::chown((s.path / "hvactor-0").c_str(), 65534, 65534) == 0);
  CHECK_THROWS_WITH_AS(hvactor::owned_dir::make(s.path.string(), {"hvactor-0", "x"}, "dir"),
                       doctest::Contains("not a directory owned by this user"), hvactor::error);
  CHECK(fs::is_empty(s.path / "hvactor-0"));
}

} // TEST_SUITE
