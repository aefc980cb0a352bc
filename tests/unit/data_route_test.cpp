// hvactor::train's bytes on the driver's data link (the link's half of
// train/internal/transfer.hpp) over real loopback sockets: shards, resumes
// and uploads arrive byte for byte; an upload with a wrong digest, more
// bytes than it announced, or a sender gone halfway leaves nothing; and the
// shard folders of drivers that are gone are swept. train_transfer_test
// drives the same transfers through the progress actor and a worker's
// side.

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "unit_temp_dir.hpp"
#include <fmt/format.h>

#include "base/net/data_link.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/transfer.hpp"
#include "train_bytes.hpp"
#include "train/internal/shard_bytes.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace dl = hvactor::data_link;
using namespace std::chrono_literals;

namespace {

using hvactor::test::read_file;
using hvactor::test::upload_raw;
using hvactor::test::write_file;


// A checkpoint directory: nested, an empty file, a name with a space and
// unicode, 9 MiB (three stream chunks).
void make_checkpoint(const fs::path& dir) {
  write_file(dir / "model.bin", 9 << 20, 1);
  write_file(dir / "sub" / "opt state ñ.bin", 12345, 2);
  write_file(dir / "sub" / "empty", 0, 3);
  fs::create_directories(dir / "nothing here");
}

void check_same(const fs::path& a, const fs::path& b) {
  for (auto& rel : {"model.bin", "sub/opt state ñ.bin", "sub/empty"}) {
    CAPTURE(rel);
    CHECK(read_file(a / rel) == read_file(b / rel));
  }
  CHECK(fs::is_directory(b / "nothing here"));
}

train::link_target target(const dl::server& srv) {
  return {"127.0.0.1", srv.port(), {}, 5s};
}

dl::server::options plain() {
  dl::server::options o;
  o.host = "127.0.0.1";
  o.io_timeout = 5s;
  return o;
}

// Sends the frames of `dir`'s stream, `tamper`ed, and returns the
// driver's answer ("" when it kept the checkpoint).
} // namespace

TEST_SUITE("data_route") {

TEST_CASE("a shard and a resume checkpoint arrive byte for byte on the data link") {
  hvactor_test::temp_dir tmp{"hvactor-route"};
  auto shards = tmp.path / "shards";
  write_file(shards / "0" / "1", (5 << 20) + 3, 7);
  make_checkpoint(tmp.path / "resume");
  dl::server srv{plain()};
  auto bytes = train::fetch_shard_by_link(target(srv),
                                          train::offer_shard(srv, shards, 0, 1, 10s));
  auto want = read_file(shards / "0" / "1");
  REQUIRE(bytes.size == want.size());
  CHECK(std::memcmp(bytes.data.get(), want.data(), want.size()) == 0);
  // A shard that does not exist is refused when the ticket is asked for.
  CHECK_THROWS_WITH(train::offer_shard(srv, shards, 0, 2, 10s), doctest::Contains("no shard 2"));
  train::fetch_resume_by_link(target(srv), train::offer_resume(srv, tmp.path / "resume", 10s),
                              tmp.path / "got");
  check_same(tmp.path / "resume", tmp.path / "got");
}

TEST_CASE("an upload is kept whole, or refused with nothing left: wrong digest, extra bytes, a "
          "sender gone") {
  hvactor_test::temp_dir tmp{"hvactor-route"};
  make_checkpoint(tmp.path / "ckpt");
  dl::server srv{plain()};
  auto slot_at = [&](const char* name) {
    return std::make_shared<train::upload_slot>(tmp.path / name);
  };
  SUBCASE("whole") {
    auto slot = slot_at("ok");
    auto why = train::upload_by_link(target(srv), train::offer_upload(srv, slot, 0, 10s),
                                     tmp.path / "ckpt");
    CHECK(why.empty());
    CHECK(slot->claim().empty());
    check_same(tmp.path / "ckpt", tmp.path / "ok");
  }
  SUBCASE("a flipped byte: the digest does not match") {
    auto slot = slot_at("flipped");
    auto t = train::offer_upload(srv, slot, 4, 10s);
    auto why = upload_raw("127.0.0.1", srv.port(), t, tmp.path / "ckpt",
                          [](auto& chunks) { chunks[1][1000] ^= 1; });
    CHECK(why.find("checkpoint of report 5 refused") != std::string::npos);
    CHECK(why.find("digest") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "flipped"));
    CHECK(slot->claim().find("digest") != std::string::npos);
  }
  SUBCASE("more bytes than the file announced") {
    auto slot = slot_at("longer");
    auto t = train::offer_upload(srv, slot, 0, 10s);
    auto why = upload_raw("127.0.0.1", srv.port(), t, tmp.path / "ckpt",
                          [](auto& chunks) {
                            // A data record of 4 bytes after the last file ended.
                            auto& last = chunks.back();
                            std::vector<char> extra{3, 4, 0, 0, 0, 'x', 'y', 'z', 'w'};
                            last.insert(last.begin(), extra.begin(), extra.end());
                          });
    CHECK_FALSE(why.empty());
    CHECK_FALSE(fs::exists(tmp.path / "longer"));
  }
  SUBCASE("a frame over the chunk bound") {
    auto slot = slot_at("huge");
    auto s = dl::connect("127.0.0.1", srv.port(), {}, train::offer_upload(srv, slot, 0, 10s), 5s);
    s->write_u64(uint64_t{1} << 40);
    s->finish();
    for (int i = 0; i < 500 && slot->claim() == "its transfer had not finished"; ++i)
      std::this_thread::sleep_for(10ms);
    CHECK(slot->claim().find("announced 1099511627776 bytes") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "huge"));
  }
  SUBCASE("the sender gone halfway") {
    auto slot = slot_at("half");
    {
      auto s = dl::connect("127.0.0.1", srv.port(), {}, train::offer_upload(srv, slot, 0, 10s),
                           5s);
      train::checkpoint_source source{tmp.path / "ckpt"};
      auto first = source.next();
      s->write_frame(first->data(), first->size());
    } // closed without the rest
    for (int i = 0; i < 500 && slot->claim() == "its transfer had not finished"; ++i)
      std::this_thread::sleep_for(10ms);
    CHECK(slot->claim().find("refused") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "half"));
  }
  SUBCASE("cancelled while it streams: removed when it ends") {
    auto slot = slot_at("cancelled");
    slot->cancel();
    auto why = train::upload_by_link(target(srv), train::offer_upload(srv, slot, 0, 10s),
                                     tmp.path / "ckpt");
    CHECK(why.empty());
    CHECK_FALSE(fs::exists(tmp.path / "cancelled"));
  }
}

TEST_CASE("shard folders of drivers that are gone are swept; live, foreign and linked ones stay") {
  hvactor_test::temp_dir tmp{"hvactor-route"};
  auto mine = train::make_shard_dir(tmp.path);
  CHECK(mine.filename().string().find(fmt::format("-{}-", ::getpid())) != std::string::npos);
  CHECK((fs::status(mine).permissions() & fs::perms::all) == fs::perms::owner_all);
  // A process that has exited: its pid names no process now.
  pid_t dead = ::fork();
  if (dead == 0)
    ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  auto ns = mine.filename().string().substr(std::string{"hvactor-train-shards-"}.size());
  ns = ns.substr(0, ns.find('-'));
  auto gone = tmp.path / fmt::format("hvactor-train-shards-{}-{}-abcdef", ns, dead);
  fs::create_directories(gone / "0");
  write_file(gone / "0" / "0", 100, 1);
  auto live = tmp.path / fmt::format("hvactor-train-shards-{}-{}-abcdef", ns, ::getppid());
  auto other_ns = tmp.path / fmt::format("hvactor-train-shards-1{}-{}-abcdef", ns, dead);
  auto linked = tmp.path / fmt::format("hvactor-train-shards-{}-{}-linked", ns, dead);
  fs::create_directories(live);
  fs::create_directories(other_ns);
  fs::create_directory_symlink(mine, linked);
  CHECK(train::sweep_shard_dirs(tmp.path) == 1);
  CHECK_FALSE(fs::exists(gone));
  CHECK(fs::exists(mine));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other_ns));
  CHECK(fs::is_symlink(linked));
}

}
