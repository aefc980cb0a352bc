// The driver's train_progress actor in a real actor system (the process's
// one, process_system), with a plain data link on loopback: reports
// answered once the trainer takes them, checkpoints copied or uploaded and
// persisted, the resume checkpoint and shards handed out, what a peer may
// not make it hold, and what ends an attempt. And the process system
// itself: one per process, shared.

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include <caf/scoped_actor.hpp>
#include <doctest/doctest.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/process_system.hpp"
#include "base/net/data_link.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/report_pipe.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"
#include "train/internal/transfer.hpp"
#include "train_bytes.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
namespace dl = hvactor::data_link;
using namespace std::chrono_literals;

namespace {

using hvactor::test::upload_raw;

struct run_fixture {
  hvactor::process_system::share sys = hvactor::process_system::acquire();
  fs::path dir;
  /// The attempt's data link: plain, loopback peers of this user only.
  std::shared_ptr<dl::server> link;
  train::train_progress progress;

  explicit run_fixture(int size, std::optional<int> keep = std::nullopt, bool local = false) {
    char pattern[] = "/tmp/hvactor-progress-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir = pattern;
    dl::server::options o;
    o.host = "127.0.0.1";
    o.io_timeout = 5s;
    link = std::make_shared<dl::server>(std::move(o));
    progress = spawn(config(size, keep, local));
  }

  /// The attempt's configuration as the trainer makes it.
  train::progress_config config(int size, std::optional<int> keep = std::nullopt,
                                bool local = false) {
    train::progress_config cfg{size, dir, keep, {}, local};
    cfg.data = link;
    cfg.ticket_bound = 10s;
    return cfg;
  }

  train::train_progress spawn(train::progress_config cfg) {
    return train::spawn_train_progress(*sys, std::move(cfg));
  }

  /// Where a worker finds the data link.
  train::link_target target() const {
    return {"127.0.0.1", link->port(), {}, 5s};
  }

  /// A ticket for rank 0's checkpoint of report `index` (tr_upload).
  caf::expected<std::string> upload_ticket(uint64_t index) {
    return hvactor::ask<std::string>(*sys, progress, 5s, train::tr_upload_atom_v, index);
  }

  /// What the run's directory holds, by name.
  std::set<std::string> entries() const {
    std::set<std::string> out;
    for (auto& e : fs::directory_iterator{dir})
      out.insert(e.path().filename().string());
    return out;
  }

  /// Waits up to 5 s for the run's directory to hold just `want`.
  bool settles_to(const std::set<std::string>& want) const {
    for (int i = 0; i < 500 && entries() != want; ++i)
      std::this_thread::sleep_for(10ms);
    return entries() == want;
  }

  ~run_fixture() {
    caf::anon_send_exit(progress, caf::exit_reason::user_shutdown);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  /// Sends `r` from `self` and returns the request's id (answered later).
  caf::message_id send(caf::scoped_actor& self, train::train_report r) {
    return self->request(progress, caf::infinite, train::tr_report_atom_v, std::move(r)).id();
  }

  /// The answer to request `id` of `self`, or "<error: ...>" / "<none>".
  static std::string answer(caf::scoped_actor& self, caf::message_id id,
                            std::chrono::milliseconds bound = 5s) {
    std::string out = "<none>";
    caf::blocking_actor::accept_one_cond one;
    self->varargs_receive(
      one, id, [&](std::string& s) { out = s; },
      [&](caf::error& e) { out = "<error: " + hvactor::describe(e) + ">"; },
      caf::after(bound) >> [] {});
    return out;
  }

  caf::expected<train::train_event> await(uint64_t index, std::chrono::milliseconds bound = 5s) {
    return hvactor::ask<train::train_event>(*sys, progress, bound, train::tr_await_atom_v, index);
  }
};

train::train_report report_of(int rank, uint64_t index, bool checkpoint = false) {
  return {rank, index, train::encode_report({{"loss", 0.5}}, checkpoint), checkpoint};
}

// Sends `dir`'s stream on ticket `t`, its chunks `tamper`ed, and returns
// the driver's answer ("" when it kept the checkpoint).
} // namespace

TEST_SUITE("train_progress") {

TEST_CASE("every rank is answered when the trainer takes the report, its checkpoint persisted") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  // One file of 1.5 stream chunks, uploaded on the data link.
  fs::path src = run.dir / "src";
  fs::create_directories(src);
  std::string body(hvactor::knobs::ship_chunk_bytes * 3 / 2, 'x');
  std::ofstream{src / "model.pt"} << body;
  auto t = run.upload_ticket(0);
  REQUIRE(t);
  CHECK(train::upload_by_link(run.target(), *t, src).empty());
  auto a0 = run.send(self, report_of(0, 0, true));
  auto a1 = run.send(self, report_of(1, 0));
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->kind == train::train_event::report);
  CHECK(ev->metrics.size() == 2);
  CHECK(ev->failure.empty());
  CHECK(fs::path{ev->checkpoint_dir}.filename() == "checkpoint_000000");
  std::ifstream in{fs::path{ev->checkpoint_dir} / "model.pt"};
  std::string back{std::istreambuf_iterator<char>{in}, {}};
  CHECK(back == body);
  CHECK(run.answer(self, a0).empty());
  CHECK(run.answer(self, a1).empty());
  // The upload's own directory became the checkpoint: nothing else stays.
  CHECK(run.entries() == std::set<std::string>{"checkpoint_000000", "src"});
  // A trainer whose wait timed out just as it was answered gets it again.
  auto again = run.await(0);
  REQUIRE(again);
  CHECK(again->checkpoint_dir == ev->checkpoint_dir);
}

TEST_CASE("a peer cannot make the driver hold oversized or unexpected messages") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  auto refused = [&](train::train_report r) {
    auto out = run.answer(self, run.send(self, std::move(r)));
    return out.find("refused") != std::string::npos;
  };
  auto big = report_of(1, 0);
  big.metrics.assign(train::max_metrics_bytes + 1, 'm');
  CHECK(refused(big));
  // Beyond what a worker sends ahead of the report being collected.
  CHECK(refused(report_of(1, train::reports_sent_ahead + 1)));
  CHECK(refused(report_of(2, 0))); // no such rank
  CHECK(refused(report_of(1, 0, true))); // only rank 0 sends a checkpoint
  CHECK_FALSE(run.upload_ticket(5)); // not the report being collected
  auto t = run.upload_ticket(0);
  REQUIRE(t);
  auto again = run.upload_ticket(0); // one per report
  REQUIRE_FALSE(again);
  CHECK(run.sys->render(again.error()).find("a checkpoint upload for report 1") != std::string::npos);
  // A frame over the chunk bound is refused before anything is allocated,
  // and nothing of the upload stays.
  {
    auto s = dl::connect("127.0.0.1", run.link->port(), {}, *t, 5s);
    s->write_u64(hvactor::knobs::ship_chunk_bytes + 1);
    s->finish();
    std::vector<char> why;
    s->read_frame(why, 1 << 16);
    auto text = std::string{why.begin(), why.end()};
    CHECK(text.find("checkpoint of report 1 refused") != std::string::npos);
    CHECK(text.find("announced 4194305 bytes") != std::string::npos);
  }
  CHECK(run.entries().empty());
  // Rank 1's report stays waiting; a second one of it is refused.
  auto first = run.send(self, report_of(1, 0));
  CHECK(refused(report_of(1, 0)));
  CHECK(run.answer(self, first, 100ms) == "<none>");
}

TEST_CASE("a refused checkpoint stream fails the report on every rank and leaves nothing") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  fs::path src = run.dir / "src";
  fs::create_directories(src);
  std::ofstream{src / "w.bin"} << std::string(1000, 'w');
  auto t = run.upload_ticket(0);
  REQUIRE(t);
  // A byte of w.bin flipped: the digest no longer matches.
  auto why = upload_raw(run.target().host, run.target().port, *t, src,
                        [](auto& chunks) { chunks[0][chunks[0].size() - 90] ^= 1; });
  CHECK(why.find("checkpoint of report 1 refused") != std::string::npos);
  CHECK(why.find("digest") != std::string::npos);
  auto a0 = run.send(self, report_of(0, 0, true));
  auto a1 = run.send(self, report_of(1, 0));
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->checkpoint_dir.empty());
  CHECK(ev->failure.find("could not persist the checkpoint of report 1: its upload failed: "
                         "checkpoint of report 1 refused")
        != std::string::npos);
  CHECK(ev->failure.find("digest") != std::string::npos);
  CHECK(run.answer(self, a0) == ev->failure);
  CHECK(run.answer(self, a1) == ev->failure);
  CHECK(run.entries() == std::set<std::string>{"src"}); // no checkpoint, no partial one
}

TEST_CASE("rank 0 gone mid-upload: the attempt ends and nothing of its checkpoint stays") {
  run_fixture run{2};
  fs::path src = run.dir / "src";
  fs::create_directories(src);
  std::ofstream{src / "w.bin"} << std::string(3 << 20, 'w');
  auto t = run.upload_ticket(0);
  REQUIRE(t);
  {
    auto s = dl::connect("127.0.0.1", run.link->port(), {}, *t, 5s);
    train::checkpoint_source source{src, 1 << 20};
    auto first = source.next();
    s->write_frame(first->data(), first->size());
  } // the process died: closed without the rest
  caf::anon_send(run.progress, train::tr_fail_atom_v, int32_t{0}, std::string{"killed"});
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->kind == train::train_event::rank_failed);
  CHECK(run.settles_to({"src"}));
  // The attempt is over: no more uploads.
  auto late = run.upload_ticket(0);
  REQUIRE_FALSE(late);
  CHECK(run.sys->render(late.error()).find("after the attempt ended") != std::string::npos);
}

TEST_CASE("tr_local: the driver copies a directory of its own machine, only when allowed") {
  auto make_src = [](const fs::path& root) {
    fs::create_directories(root / "src" / "sub");
    std::ofstream{root / "src" / "sub" / "w.bin"} << std::string(100'000, 'w');
    return root / "src";
  };
  auto local = [](run_fixture& run, const fs::path& src) {
    return hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_local_atom_v, uint64_t{0},
                              src.string());
  };
  { // Not allowed (a driver off loopback): refused, nothing read.
    run_fixture run{1};
    auto src = make_src(run.dir);
    auto refused = local(run, src);
    REQUIRE_FALSE(refused);
    CHECK(run.sys->render(refused.error()).find("only from its own machine") != std::string::npos);
    CHECK(run.entries() == std::set<std::string>{"src"});
  }
  { // Allowed: copied, then persisted with the report.
    run_fixture run{1, std::nullopt, true};
    auto src = make_src(run.dir);
    REQUIRE(local(run, src));
    CHECK_FALSE(local(run, src)); // one per report
    caf::scoped_actor self{*run.sys};
    auto a0 = run.send(self, report_of(0, 0, 1));
    auto ev = run.await(0);
    REQUIRE(ev);
    CHECK(ev->failure.empty());
    std::ifstream in{fs::path{ev->checkpoint_dir} / "sub" / "w.bin"};
    CHECK(std::string{std::istreambuf_iterator<char>{in}, {}} == std::string(100'000, 'w'));
    CHECK(run.answer(self, a0).empty());
    // Copied into the same upload slot as an upload, then persisted.
    CHECK(run.entries() == std::set<std::string>{"checkpoint_000000", "src"});
  }
  { // An upload after a copy is refused; the copy stays the report's
    // checkpoint (one per report, whichever route it took).
    run_fixture run{1, std::nullopt, true};
    auto src = make_src(run.dir);
    REQUIRE(local(run, src));
    auto upload = run.upload_ticket(0);
    REQUIRE_FALSE(upload);
    CHECK(run.sys->render(upload.error()).find("a checkpoint upload for report 1")
          != std::string::npos);
    caf::scoped_actor self{*run.sys};
    auto a0 = run.send(self, report_of(0, 0, true));
    auto ev = run.await(0);
    REQUIRE(ev);
    CHECK(ev->failure.empty());
    CHECK(fs::exists(fs::path{ev->checkpoint_dir} / "sub" / "w.bin"));
    CHECK(run.answer(self, a0).empty());
    CHECK(run.entries() == std::set<std::string>{"checkpoint_000000", "src"});
  }
  { // A copy that fails is refused naming the report, fails it, and
    // leaves nothing.
    run_fixture run{1, std::nullopt, true};
    auto refused = local(run, run.dir / "missing");
    REQUIRE_FALSE(refused);
    CHECK(run.sys->render(refused.error()).find("checkpoint of report 1 refused") != std::string::npos);
    CHECK_FALSE(local(run, make_src(run.dir))); // the report had its one
    caf::scoped_actor self{*run.sys};
    auto a0 = run.send(self, report_of(0, 0, true));
    auto ev = run.await(0);
    REQUIRE(ev);
    CHECK(ev->checkpoint_dir.empty());
    CHECK(ev->failure.find("its upload failed: checkpoint of report 1 refused") != std::string::npos);
    CHECK(run.answer(self, a0) == ev->failure);
    CHECK(run.entries() == std::set<std::string>{"src"});
  }
  if (::geteuid() == 0) { // A file of another user is never copied.
    run_fixture run{1, std::nullopt, true};
    auto src = make_src(run.dir);
    REQUIRE(::chown((src / "sub" / "w.bin").c_str(), 65534, 65534) == 0);
    auto refused = local(run, src);
    REQUIRE_FALSE(refused);
    CHECK(run.sys->render(refused.error()).find("belongs to uid 65534") != std::string::npos);
    CHECK(run.entries() == std::set<std::string>{"src"}); // no partial checkpoint
  }
}

TEST_CASE("tr_fetch: the checkpoint to resume from on the data link, per rank, byte for byte; "
          "only for ranks of an attempt that has one") {
  run_fixture run{2};
  auto src = run.dir / "resume-src";
  fs::create_directories(src / "a" / "b");
  fs::create_directories(src / "empty");
  std::ofstream{src / "top.txt"} << "top";
  std::string big(5'000'000, 'z');
  std::ofstream{src / "a" / "b" / "big.bin", std::ios::binary} << big;
  auto cfg = run.config(2);
  cfg.resume_dir = src;
  auto progress = run.spawn(cfg);
  auto ticket = [&](const train::train_progress& p, int32_t rank) {
    return hvactor::ask<std::string>(*run.sys, p, 5s, train::tr_fetch_atom_v, rank);
  };
  // Both ranks' tickets first, then their streams: each has its own.
  auto t0 = ticket(progress, 0);
  auto t1 = ticket(progress, 1);
  REQUIRE(t0);
  REQUIRE(t1);
  CHECK(*t0 != *t1);
  train::fetch_resume_by_link(run.target(), *t1, run.dir / "out1");
  train::fetch_resume_by_link(run.target(), *t0, run.dir / "out0");
  for (auto* out : {"out0", "out1"}) {
    CHECK(fs::is_directory(run.dir / out / "empty"));
    std::ifstream in{run.dir / out / "a" / "b" / "big.bin", std::ios::binary};
    CHECK(std::string{std::istreambuf_iterator<char>{in}, {}} == big);
  }
  // A ticket is good once.
  CHECK_THROWS_AS(train::fetch_resume_by_link(run.target(), *t0, run.dir / "out2"),
                  hvactor::error);
  // No such rank: refused, naming the call.
  for (int32_t rank : {2, -1}) {
    auto no = ticket(progress, rank);
    REQUIRE_FALSE(no);
    CHECK(run.sys->render(no.error()).find("train::get_checkpoint: this attempt has no "
                                           "checkpoint to resume from for that rank")
          != std::string::npos);
  }
  // An attempt without a checkpoint to resume from refuses.
  CHECK_FALSE(ticket(run.progress, 0));
  // So does a driver without a data link.
  cfg.data.reset();
  auto unlinked = run.spawn(cfg);
  auto none = ticket(unlinked, 0);
  REQUIRE_FALSE(none);
  CHECK(run.sys->render(none.error()).find("has no data link") != std::string::npos);
  caf::anon_send_exit(progress, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(unlinked, caf::exit_reason::user_shutdown);
}

TEST_CASE("tr_fetch: a rank's shard on the data link; a missing one refused naming it") {
  run_fixture run{2};
  auto shards = run.dir / "shards";
  fs::create_directories(shards / "0");
  std::string bytes(3'000'003, 's');
  std::ofstream{shards / "0" / "1", std::ios::binary} << bytes;
  auto cfg = run.config(2);
  cfg.shard_dir = shards;
  auto progress = run.spawn(cfg);
  auto ticket = [&](uint32_t dataset, int32_t rank) {
    return hvactor::ask<std::string>(*run.sys, progress, 5s, train::tr_fetch_atom_v, dataset,
                                     rank);
  };
  auto t = ticket(0, 1);
  REQUIRE(t);
  auto got = train::fetch_shard_by_link(run.target(), *t);
  REQUIRE(got.size == bytes.size());
  CHECK(std::string(reinterpret_cast<const char*>(got.data.get()), got.size) == bytes);
  auto missing = ticket(0, 0);
  REQUIRE_FALSE(missing);
  CHECK(run.sys->render(missing.error()).find("train::get_dataset_shard: no shard 0 of dataset 0")
        != std::string::npos);
  CHECK_FALSE(ticket(3, 1));
  caf::anon_send_exit(progress, caf::exit_reason::user_shutdown);
}

TEST_CASE("a rank that returned after fewer reports: the await names both ranks") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  auto waiting = run.send(self, report_of(0, 0));
  REQUIRE(hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_done_atom_v, int32_t{1},
                             uint64_t{0}));
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->kind == train::train_event::failed);
  CHECK(ev->failure.find("rank 1 returned from the training loop after 0 reports, while rank 0 "
                         "made report 1")
        != std::string::npos);
  CHECK(run.answer(self, waiting).find("same number of times") != std::string::npos);
}

TEST_CASE("a rank whose loop threw ends the attempt; every rank done ends it cleanly") {
  {
    run_fixture run{2};
    caf::scoped_actor self{*run.sys};
    auto waiting = run.send(self, report_of(1, 0));
    caf::anon_send(run.progress, train::tr_fail_atom_v, int32_t{0}, std::string{"boom"});
    auto ev = run.await(0);
    REQUIRE(ev);
    CHECK(ev->kind == train::train_event::rank_failed);
    CHECK(ev->rank == 0);
    CHECK(ev->failure == "rank 0 failed: boom");
    CHECK(run.answer(self, waiting).find("boom") != std::string::npos);
  }
  run_fixture run{2};
  for (int32_t r = 0; r < 2; ++r)
    REQUIRE(hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_done_atom_v, r,
                               uint64_t{0}));
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->kind == train::train_event::done);
}

TEST_CASE("the trainer's wait is bounded and a quiet attempt answers nothing") {
  run_fixture run{2};
  auto ev = run.await(0, 50ms);
  REQUIRE_FALSE(ev);
  CHECK(ev.error() == caf::sec::request_timeout);
}

} // TEST_SUITE

TEST_SUITE("process_system") {

TEST_CASE("one system per process: shared while held, a new one after the last share") {
  auto a = hvactor::process_system::acquire();
  auto b = hvactor::process_system::acquire();
  CHECK(a.get() == b.get());
  CHECK(hvactor::process_system::running());
  auto node = a->node();
  a.reset();
  b.reset();
  auto c = hvactor::process_system::acquire();
  CHECK(c->node() != node); // the first one ended with its last share
  // A lent system is handed out instead while the loan lasts.
  {
    auto loan = hvactor::process_system::lend(*c);
    auto d = hvactor::process_system::acquire();
    CHECK(d.get() == c.get());
    CHECK_THROWS_AS(hvactor::process_system::lend(*c), std::logic_error);
  }
}

} // TEST_SUITE

TEST_SUITE("report_pipe") {

TEST_CASE("reports ahead of their turn wait at the driver and are answered in turn, bounded") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  // Rank 1 sends reports 0-3 at once; rank 0 sends them one by one.
  std::vector<caf::message_id> ahead;
  for (uint64_t i = 0; i < 4; ++i)
    ahead.push_back(run.send(self, report_of(1, i)));
  CHECK(run.answer(self, ahead[1], 100ms) == "<none>"); // kept, not refused
  for (uint64_t i = 0; i < 4; ++i) {
    auto mine = run.send(self, report_of(0, i));
    auto ev = run.await(i);
    REQUIRE(ev);
    CHECK(ev->index == i);
    CHECK(ev->metrics.size() == 2);
    CHECK(run.answer(self, mine).empty());
    CHECK(run.answer(self, ahead[i]).empty());
  }
  // At most report_bytes_in_flight bytes of metrics per rank wait ahead.
  auto fat = [](uint64_t i) {
    auto r = report_of(1, i);
    r.metrics.assign(train::max_metrics_bytes, 'f');
    return r;
  };
  std::vector<caf::message_id> kept;
  for (uint64_t i = 5; i < 9; ++i) // 4 x 16 MiB: the bound
    kept.push_back(run.send(self, fat(i)));
  auto over = run.answer(self, run.send(self, fat(9)));
  CHECK(over.find("refused") != std::string::npos);
  // A failure answers every report kept ahead at once.
  caf::anon_send(run.progress, train::tr_fail_atom_v, int32_t{0}, std::string{"boom"});
  for (auto id : kept)
    CHECK(run.answer(self, id).find("boom") != std::string::npos);
}

TEST_CASE("queued reports reach the driver in order; a refusal is thrown by the next push and by "
          "drain") {
  run_fixture run{2};
  train::report_pipe p0{*run.sys, run.progress, 5s};
  train::report_pipe p1{*run.sys, run.progress, 5s};
  // Pushing returns at once: rank 1 queues ten reports before any answer.
  for (uint64_t i = 0; i < 10; ++i)
    p1.push(report_of(1, i));
  for (uint64_t i = 0; i < 10; ++i)
    p0.push(report_of(0, i));
  for (uint64_t i = 0; i < 10; ++i) {
    auto ev = run.await(i);
    REQUIRE(ev);
    CHECK(ev->kind == train::train_event::report);
    CHECK(ev->index == i);
    CHECK(ev->metrics.size() == 2);
  }
  p0.drain();
  p1.drain();
  // Report 6 again, while the driver collects report 11: refused.
  p1.push(report_of(1, 5));
  CHECK_THROWS_WITH_AS(p1.drain(), doctest::Contains("refused"), hvactor::error);
  // The failure stays: the next report() throws it too.
  CHECK_THROWS_WITH_AS(p1.push(report_of(1, 10)), doctest::Contains("refused"), hvactor::error);
}

TEST_CASE("a driver that goes away fails the queued reports at once, not after the limit") {
  run_fixture run{2};
  train::report_pipe p0{*run.sys, run.progress, 60s};
  p0.push(report_of(0, 0)); // waits for rank 1, which never reports
  caf::anon_send_exit(run.progress, caf::exit_reason::kill);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(p0.drain(), hvactor::error);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("a report nobody answers fails within the limit, naming it") {
  run_fixture run{2};
  train::report_pipe p0{*run.sys, run.progress, 300ms};
  p0.push(report_of(0, 0)); // rank 1 never reports
  CHECK_THROWS_WITH_AS(p0.drain(), doctest::Contains("report 1 of rank 0 was not acknowledged"),
                       hvactor::error);
}

} // TEST_SUITE
