// hvactor::train's two routes for bulk bytes (train/internal/transfer.hpp)
// from a worker's side, against a real train_progress actor and a plain
// data link on loopback: the route choice, shards, the checkpoint to
// resume from (copied on the same machine, on the data link when that copy
// fails) and rank 0's checkpoint (copied by the driver or uploaded), and
// the errors a worker throws, naming the report.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>
#include <doctest/doctest.h>

#include "unit_temp_dir.hpp"

#include "base/internal/actor_system.hpp"
#include "base/internal/process_system.hpp"
#include "base/net/data_link.hpp"
#include "base/net/port_guard.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"
#include "train/internal/transfer.hpp"
#include "train_bytes.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace dl = hvactor::data_link;
using namespace std::chrono_literals;

namespace {

using hvactor::test::read_file;
using hvactor::test::write_file;

// A checkpoint: 5 MiB (three stream chunks on the link), nested, unicode.
void make_checkpoint(const fs::path& dir) {
  write_file(dir / "model.bin", 5 << 20, 1);
  write_file(dir / "sub" / "opt ñ.bin", 4321, 2);
  fs::create_directories(dir / "empty");
}

void check_same(const fs::path& a, const fs::path& b) {
  for (auto& rel : {"model.bin", "sub/opt ñ.bin"}) {
    CAPTURE(rel);
    CHECK(read_file(a / rel) == read_file(b / rel));
  }
  CHECK(fs::is_directory(b / "empty"));
}

// A driver of `size` ranks: its run directory, shard files, the checkpoint
// to resume from, its data link and progress actor.
struct driver_fixture {
  hvactor::process_system::share sys = hvactor::process_system::acquire();
  hvactor_test::temp_dir tmp{"hvactor-transfer"};
  fs::path run_dir = tmp.path / "run";
  fs::path shards = tmp.path / "shards";
  fs::path resume = tmp.path / "resume";
  std::shared_ptr<dl::server> link;
  train::train_progress progress;

  explicit driver_fixture(bool local) {
    fs::create_directories(run_dir);
    write_file(shards / "0" / "0", (3 << 20) + 7, 9);
    make_checkpoint(resume);
    dl::server::options o;
    o.host = "127.0.0.1";
    o.io_timeout = 5s;
    link = std::make_shared<dl::server>(std::move(o));
    train::progress_config cfg{1, run_dir, {}, {}, local, shards, resume};
    cfg.data = link;
    cfg.ticket_bound = 10s;
    progress = train::spawn_train_progress(*sys, std::move(cfg));
  }
  ~driver_fixture() {
    caf::anon_send_exit(progress, caf::exit_reason::user_shutdown);
  }

  /// Rank `rank`'s side on `route`.
  train::worker_transfers worker(train::byte_route route, int32_t rank = 0) {
    return {*sys, progress, route, {"127.0.0.1", link->port(), {}, 5s}, rank};
  }

  /// Rank 0's report `index` with its checkpoint, the only rank's: the
  /// checkpoint the driver persisted, or its failure.
  caf::expected<train::train_event> report(uint64_t index) {
    train::train_report r{0, index, train::encode_report({{"loss", 0.5}}, true), true};
    caf::scoped_actor self{*sys};
    self->request(progress, caf::infinite, train::tr_report_atom_v, std::move(r));
    return hvactor::ask<train::train_event>(*sys, progress, 5s, train::tr_await_atom_v, index);
  }
};

} // namespace

TEST_SUITE("train_transfer") {

TEST_CASE("the route: the same machine only where the driver allows it and the worker sees its "
          "files") {
  auto mine = train::machine_view();
  REQUIRE_FALSE(mine.empty());
  CHECK(train::choose_route(true, mine) == train::byte_route::same_machine);
  CHECK(train::choose_route(false, mine) == train::byte_route::data_link);
  CHECK(train::choose_route(true, "") == train::byte_route::data_link);
  CHECK(train::choose_route(true, mine + "x") == train::byte_route::data_link);
  // The driver: loopback, no TLS, the port guard's same-user rule, and
  // not turned off.
  CHECK(train::same_machine_allowed("127.0.0.1", false)
        == hvactor::port_guard::current().same_user);
  CHECK_FALSE(train::same_machine_allowed("127.0.0.1", true));
  CHECK_FALSE(train::same_machine_allowed("10.1.2.3", false));
  ::setenv(train::local_route_env, "0", 1);
  CHECK_FALSE(train::same_machine_allowed("127.0.0.1", false));
  ::unsetenv(train::local_route_env);
}

TEST_CASE("the same machine: shards mapped, the resume checkpoint copied, rank 0's checkpoint "
          "copied by the driver") {
  driver_fixture driver{true};
  auto rank0 = driver.worker(train::byte_route::same_machine);
  CHECK(rank0.route() == train::byte_route::same_machine);
  auto shard = rank0.fetch_shard(0, driver.shards.string());
  auto want = read_file(driver.shards / "0" / "0");
  REQUIRE(shard.size == want.size());
  CHECK(std::memcmp(shard.data.get(), want.data(), want.size()) == 0);
  // No file of dataset 1: the mapping names the path.
  CHECK_THROWS_WITH_AS(rank0.fetch_shard(1, driver.shards.string()),
                       doctest::Contains("cannot open the shard file"), hvactor::error);
  rank0.fetch_resume(driver.resume.string(), driver.tmp.path / "got");
  check_same(driver.resume, driver.tmp.path / "got");
  // The copy fails (no such directory on this side): the data link
  // brings it.
  rank0.fetch_resume((driver.tmp.path / "elsewhere").string(), driver.tmp.path / "streamed");
  check_same(driver.resume, driver.tmp.path / "streamed");

  rank0.upload(0, driver.resume);
  auto ev = driver.report(0);
  REQUIRE(ev);
  CHECK(ev->failure.empty());
  check_same(driver.resume, ev->checkpoint_dir);
  // A copy the driver refuses: the worker's error names the report.
  CHECK_THROWS_WITH_AS(rank0.upload(1, driver.tmp.path / "missing"),
                       doctest::Contains("train::report: the driver could not copy the "
                                         "checkpoint of report 2: train::report: checkpoint of "
                                         "report 2 refused"),
                       hvactor::error);
}

TEST_CASE("the data link: shards, the resume checkpoint and rank 0's checkpoint; refusals name "
          "the report") {
  driver_fixture driver{false};
  auto rank0 = driver.worker(train::byte_route::data_link);
  auto shard = rank0.fetch_shard(0, "/nowhere"); // the driver's shard_dir counts
  auto want = read_file(driver.shards / "0" / "0");
  REQUIRE(shard.size == want.size());
  CHECK(std::memcmp(shard.data.get(), want.data(), want.size()) == 0);
  CHECK_THROWS_WITH_AS(rank0.fetch_shard(1, ""),
                       doctest::Contains("train::get_dataset_shard: the driver refused the "
                                         "transfer: train::get_dataset_shard: no shard 0 of "
                                         "dataset 1"),
                       hvactor::error);
  // The path is the driver's business: the data link brings it.
  rank0.fetch_resume(driver.resume.string(), driver.tmp.path / "got");
  check_same(driver.resume, driver.tmp.path / "got");
  // Only ranks of the attempt (of 1 rank here).
  auto stranger = driver.worker(train::byte_route::data_link, 3);
  CHECK_THROWS_WITH_AS(stranger.fetch_resume("", driver.tmp.path / "no"),
                       doctest::Contains("train::get_checkpoint: the driver refused the "
                                         "transfer: train::get_checkpoint: this attempt has no "
                                         "checkpoint to resume from for that rank"),
                       hvactor::error);

  rank0.upload(0, driver.resume);
  auto ev = driver.report(0);
  REQUIRE(ev);
  CHECK(ev->failure.empty());
  check_same(driver.resume, ev->checkpoint_dir);
  // Not the report being collected: no ticket.
  CHECK_THROWS_WITH_AS(rank0.upload(5, driver.resume),
                       doctest::Contains("train::report: the checkpoint of report 6 did not "
                                         "reach the driver: train::report: the driver refused "
                                         "the transfer: train::report: a checkpoint upload for "
                                         "report 6 while the driver collects report 2"),
                       hvactor::error);
}

TEST_CASE("the data link: an upload the driver cannot write is refused with the reason") {
  driver_fixture driver{false};
  auto rank0 = driver.worker(train::byte_route::data_link);
  fs::remove_all(driver.run_dir); // the slot's directory cannot be made
  CHECK_THROWS_WITH_AS(rank0.upload(0, driver.resume),
                       doctest::Contains("train::report: checkpoint of report 1 refused"),
                       hvactor::error);
  auto ev = driver.report(0);
  REQUIRE(ev);
  CHECK(ev->checkpoint_dir.empty());
  CHECK(ev->failure.find("its upload failed: checkpoint of report 1 refused") != std::string::npos);
}

} // TEST_SUITE
