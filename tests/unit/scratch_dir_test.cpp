// Worker scratch folders in a shared temp dir: made and removed only when
// they are this user's own real directories (a planted link or another
// user's folder is neither written through nor removed).

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "base/internal/process.hpp"

namespace {

namespace fs = std::filesystem;

/// TMPDIR pointed at a private folder for the test's lifetime.
class private_tmp {
public:
  private_tmp() {
    std::string pattern = (fs::temp_directory_path() / "hvactor-scratch-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    const char* old = std::getenv("TMPDIR");
    had_ = old != nullptr;
    old_ = old ? old : "";
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  ~private_tmp() {
    if (had_)
      ::setenv("TMPDIR", old_.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& path() const {
    return dir_;
  }

private:
  fs::path dir_;
  std::string old_;
  bool had_ = false;
};

} // namespace

TEST_SUITE("worker scratch folders") {

TEST_CASE("a scratch folder is made 0700, reused by its owner and removed with its contents") {
  private_tmp tmp;
  auto dir = hvactor::make_worker_scratch_dir(4242);
  CHECK(dir == tmp.path() / "hvactor-worker-4242");
  struct stat st {};
  REQUIRE(::lstat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(hvactor::make_worker_scratch_dir(4242) == dir);
  std::ofstream{dir / "file"} << "x";
  hvactor::remove_worker_scratch_dir(4242);
  CHECK(!fs::exists(dir));
}

TEST_CASE("a link planted where a scratch folder goes is refused and not followed when removing") {
  private_tmp tmp;
  auto victim = tmp.path() / "victim";
  fs::create_directories(victim);
  std::ofstream{victim / "precious"} << "keep me";
  fs::create_directory_symlink(victim, tmp.path() / "hvactor-worker-4243");
  CHECK_THROWS_AS(hvactor::make_worker_scratch_dir(4243), hvactor::error);
  hvactor::remove_worker_scratch_dir(4243);
  CHECK(fs::exists(victim / "precious"));
  CHECK(fs::is_symlink(tmp.path() / "hvactor-worker-4243"));
}

TEST_CASE("another user's folder where a scratch folder goes is neither used nor removed") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root to make a folder of another user");
    return;
  }
  private_tmp tmp;
  auto theirs = tmp.path() / "hvactor-worker-4244";
  fs::create_directories(theirs);
  std::ofstream{theirs / "theirs"} << "not yours";
  REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  CHECK_THROWS_AS(hvactor::make_worker_scratch_dir(4244), hvactor::error);
  hvactor::remove_worker_scratch_dir(4244);
  CHECK(fs::exists(theirs / "theirs"));
}

} // TEST_SUITE
