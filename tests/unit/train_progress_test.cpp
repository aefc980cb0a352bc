// The driver's train_progress actor in a real actor system (the process's
// one, process_system): reports answered once the trainer takes them,
// checkpoints persisted, what a peer may not make it hold, and what ends an
// attempt. And the process system itself: one per process, shared.

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <caf/scoped_actor.hpp>
#include <doctest/doctest.h>

#include "base/internal/actor_system.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs.hpp"
#include "base/internal/process_system.hpp"
#include "train/internal/checkpoint_stream.hpp"
#include "train/internal/report_pipe.hpp"
#include "train/internal/train_progress.hpp"
#include "train/internal/train_protocol.hpp"

namespace fs = std::filesystem;
namespace train = hvactor::train;
using namespace std::chrono_literals;

namespace {

struct run_fixture {
  hvactor::process_system::share sys = hvactor::process_system::acquire();
  fs::path dir;
  train::train_progress progress;

  explicit run_fixture(int size, std::optional<int> keep = std::nullopt, bool local = false) {
    char pattern[] = "/tmp/hvactor-progress-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir = pattern;
    progress = train::spawn_train_progress(*sys, {size, dir, keep, {}, local});
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

train::train_report report_of(int rank, uint64_t index, uint32_t chunks = 0) {
  return {rank, index, train::encode_report({{"loss", 0.5}}, chunks > 0), chunks};
}

} // namespace

TEST_SUITE("train_progress") {

TEST_CASE("every rank is answered when the trainer takes the report, its checkpoint persisted") {
  run_fixture run{2};
  caf::scoped_actor self{*run.sys};
  // A checkpoint of two chunks: one file of 1.5 chunks, streamed.
  fs::path src = run.dir / "src";
  fs::create_directories(src);
  std::string body(hvactor::knobs::ship_chunk_bytes * 3 / 2, 'x');
  std::ofstream{src / "model.pt"} << body;
  train::checkpoint_source stream{src};
  uint32_t no = 0;
  while (auto part = stream.next()) {
    auto ok = hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_chunk_atom_v,
                                 train::train_chunk{0, no++, std::move(*part)});
    REQUIRE(ok);
  }
  REQUIRE(no == 2);
  auto a0 = run.send(self, report_of(0, 0, 2));
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
  CHECK(refused(report_of(2, 0)));    // no such rank
  CHECK(refused(report_of(1, 0, 4))); // only rank 0 sends a checkpoint
  auto chunk = [&](train::train_chunk c) {
    return hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_chunk_atom_v, std::move(c));
  };
  fs::path src = run.dir / "src";
  fs::create_directories(src);
  std::ofstream{src / "w.bin"} << std::string(100, 'w');
  auto first_chunk = *train::checkpoint_source{src}.next();
  CHECK_FALSE(chunk({5, 0, first_chunk})); // not the report being collected
  CHECK(chunk({0, 0, first_chunk}));
  CHECK_FALSE(chunk({0, 0, first_chunk})); // repeated
  CHECK_FALSE(chunk({0, 1, std::vector<char>(hvactor::knobs::ship_chunk_bytes + 1)}));
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
  auto bytes = *train::checkpoint_source{src}.next();
  bytes[bytes.size() - 90] ^= 1; // a byte of w.bin: the digest no longer matches
  auto refused = hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_chunk_atom_v,
                                    train::train_chunk{0, 0, std::move(bytes)});
  REQUIRE_FALSE(refused);
  CHECK(run.sys->render(refused.error()).find("digest") != std::string::npos);
  auto a0 = run.send(self, report_of(0, 0, 1));
  auto a1 = run.send(self, report_of(1, 0));
  auto ev = run.await(0);
  REQUIRE(ev);
  CHECK(ev->checkpoint_dir.empty());
  CHECK(ev->failure.find("could not persist the checkpoint of report 1") != std::string::npos);
  CHECK(ev->failure.find("digest") != std::string::npos);
  CHECK(run.answer(self, a0) == ev->failure);
  CHECK(run.answer(self, a1) == ev->failure);
  for (auto& e : fs::directory_iterator{run.dir})
    CHECK(e.path().filename() == "src"); // no checkpoint, no partial one
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
  }
  { // A chunk after a copy is refused, and fails the report (it once
    // reached a sink that did not exist and crashed the driver).
    run_fixture run{1, std::nullopt, true};
    auto src = make_src(run.dir);
    REQUIRE(local(run, src));
    auto chunk = hvactor::ask<bool>(*run.sys, run.progress, 5s, train::tr_chunk_atom_v,
                                    train::train_chunk{0, 1, {'x'}});
    REQUIRE_FALSE(chunk);
    CHECK(run.sys->render(chunk.error()).find("the checkpoint was copied") != std::string::npos);
    caf::scoped_actor self{*run.sys};
    auto a0 = run.send(self, report_of(0, 0, 1));
    auto ev = run.await(0);
    REQUIRE(ev);
    CHECK(ev->checkpoint_dir.empty());
    CHECK(run.answer(self, a0) == ev->failure);
  }
  if (::geteuid() == 0) { // A file of another user is never copied.
    run_fixture run{1, std::nullopt, true};
    auto src = make_src(run.dir);
    REQUIRE(::chown((src / "sub" / "w.bin").c_str(), 65534, 65534) == 0);
    auto refused = local(run, src);
    REQUIRE_FALSE(refused);
    CHECK(run.sys->render(refused.error()).find("belongs to uid 65534") != std::string::npos);
    for (auto& e : fs::directory_iterator{run.dir})
      CHECK(e.path().filename() == "src"); // no partial checkpoint
  }
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

TEST_CASE("tr_resume: the checkpoint to resume from streams from the driver's disk, per rank, in "
          "order") {
  run_fixture run{2};
  auto src = run.dir / "resume-src";
  fs::create_directories(src / "a" / "b");
  fs::create_directories(src / "empty");
  std::ofstream{src / "top.txt"} << "top";
  std::string big(5'000'000, 'z');
  std::ofstream{src / "a" / "b" / "big.bin", std::ios::binary} << big;
  auto progress = train::spawn_train_progress(*run.sys, {2, run.dir, {}, {}, false, {}, src});
  auto chunk = [&](int32_t rank, uint32_t no) {
    return hvactor::ask<std::vector<char>>(*run.sys, progress, 5s, train::tr_resume_atom_v, rank,
                                           no);
  };
  // Ranks 0 and 1 interleaved: each has its own stream.
  train::checkpoint_sink sink0{run.dir / "out0"}, sink1{run.dir / "out1"};
  uint32_t no = 0;
  for (; !sink0.complete(); ++no) {
    auto c0 = chunk(0, no);
    auto c1 = chunk(1, no);
    REQUIRE(c0);
    REQUIRE(c1);
    REQUIRE_FALSE(c0->empty());
    sink0.feed(*c0);
    sink1.feed(*c1);
  }
  CHECK(no == 2); // 5 MB: two chunks of at most 4 MiB
  CHECK(sink1.complete());
  for (auto* out : {"out0", "out1"}) {
    CHECK(fs::is_directory(run.dir / out / "empty"));
    CHECK(fs::file_size(run.dir / out / "a" / "b" / "big.bin") == big.size());
  }
  // Past the end: empty. Out of order or for no such rank: an error.
  auto end = chunk(0, no);
  REQUIRE(end);
  CHECK(end->empty());
  CHECK_FALSE(chunk(1, 5));
  CHECK_FALSE(chunk(2, 0));
  CHECK_FALSE(chunk(-1, 0));
  // Starting over works after an error.
  auto again = chunk(1, 0);
  REQUIRE(again);
  CHECK_FALSE(again->empty());
  // An attempt without a checkpoint to resume from refuses.
  CHECK_FALSE(hvactor::ask<std::vector<char>>(*run.sys, run.progress, 5s, train::tr_resume_atom_v,
                                              int32_t{0}, uint32_t{0}));
  caf::anon_send_exit(progress, caf::exit_reason::user_shutdown);
}

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
