// The timeline (HOROVOD_TIMELINE) without processes: file names, the JSON
// the writer produces (checked by a strict parser), escaping, truncation,
// dropping, merging; the engine's phases on a one-rank job; and hvd::init /
// hvd::shutdown opening and closing the file.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>
#include <hvactor/hvd.hpp>

#include "collectives/engine/engine.hpp"
#include "mini_json.hpp"
#include "collectives/observe/timeline.hpp"

namespace fs = std::filesystem;
using hvactor::collectives::timeline;
using hvactor::collectives::timeline_event;
using hvactor::collectives::op_kind;
using hvactor::collectives::timeline_phase;
using hvactor::test::json;

namespace {

/// A fresh directory, removed at scope exit.
struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "hvactor-timeline-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const {
    return (path / name).string();
  }
};

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The file's events, parsed strictly (throws on invalid JSON).
std::vector<json> events(const std::string& path) {
  auto doc = json::parse(slurp(path));
  REQUIRE(doc.type == json::kind::array);
  return doc.items;
}

std::vector<json> named(const std::vector<json>& evs, const std::string& name) {
  std::vector<json> out;
  for (auto& e : evs)
    if (e.str("name") == name)
      out.push_back(e);
  return out;
}

timeline_event batch(std::initializer_list<const char*> names, uint64_t bytes) {
  timeline_event e;
  e.op = op_kind::allreduce;
  e.set_backend("gloo");
  e.has_type = true;
  e.type = hvactor::hvd::dtype::float32;
  e.bytes = bytes;
  for (auto* n : names) {
    e.add_name(n);
    ++e.tensors;
  }
  return e;
}

timeline::options opts(const std::string& pattern, int rank = 0) {
  timeline::options o;
  o.pattern = pattern;
  o.rank = rank;
  o.host = "node-a";
  return o;
}

} // namespace

TEST_SUITE("timeline") {

TEST_CASE("a path with {rank} names every rank's file; otherwise rank 0 writes the path and "
          "rank r writes path.rank<r>") {
  using hvactor::collectives::timeline_file;
  CHECK(timeline_file("/t/tl.{rank}.json", 0) == "/t/tl.0.json");
  CHECK(timeline_file("/t/{rank}/tl-{rank}.json", 12) == "/t/12/tl-12.json");
  CHECK(timeline_file("/t/tl.json", 0) == "/t/tl.json");
  CHECK(timeline_file("/t/tl.json", 3) == "/t/tl.json.rank3");
  CHECK(hvactor::collectives::timeline_files("tl.json", 3)
        == std::vector<std::string>{"tl.json", "tl.json.rank1", "tl.json.rank2"});
}

TEST_CASE("the writer produces a valid JSON array: one row named after the rank and host, and "
          "every phase with its tensors, dtype, bytes and fused count") {
  temp_dir dir;
  auto o = opts(dir / "sub/tl.{rank}.json", 3);
  o.host = "node \"b\"";
  timeline tl{o};
  CHECK(tl.path() == dir / "sub/tl.3.json");
  auto e = batch({"grad/a", "grad/b"}, 8192);
  int64_t t = timeline::now();
  tl.record(e, timeline_phase::queue, t, t + 1000);
  tl.record(e, timeline_phase::negotiate, t + 1000, t + 3000);
  tl.record(e, timeline_phase::memcpy_in, t + 3000, t + 4000);
  tl.record(e, timeline_phase::op, t + 4000, t + 9500);
  tl.record(e, timeline_phase::memcpy_out, t + 9500, t + 10000);
  tl.close();
  tl.close(); // idempotent
  auto evs = events(tl.path());
  auto meta = named(evs, "process_name");
  REQUIRE(meta.size() == 1);
  CHECK(meta[0].find("args")->str("name") == "rank 3 (node \"b\")");
  CHECK(meta[0].num("pid") == 3);
  for (std::string phase : {"QUEUE", "NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "GLOO_ALLREDUCE",
                            "MEMCPY_OUT_FUSION_BUFFER"}) {
    CAPTURE(phase);
    auto found = named(evs, phase);
    // The barrier gets a QUEUE span of its own when it had to queue behind
    // the batch (the engine thread was still finishing it): not this one.
    if (phase == "QUEUE")
      std::erase_if(found, [](const auto& e) {
        auto* args = e.find("args");
        return args == nullptr || args->str("tensors") != "grad/a,grad/b";
      });
    REQUIRE(found.size() == 1);
    auto& ev = found[0];
    CHECK(ev.str("ph") == "X");
    CHECK(ev.num("pid") == 3);
    CHECK(ev.num("ts") > 1.6e15); // wall-clock microseconds
    auto* args = ev.find("args");
    REQUIRE(args != nullptr);
    CHECK(args->str("tensors") == "grad/a,grad/b");
    CHECK(args->num("fused") == 2);
    CHECK(args->str("dtype") == "float32");
    CHECK(args->num("bytes") == 8192);
  }
  CHECK(named(evs, "GLOO_ALLREDUCE")[0].num("dur") == doctest::Approx(5.5));
  CHECK(named(evs, "QUEUE")[0].num("tid") != named(evs, "GLOO_ALLREDUCE")[0].num("tid"));
}

TEST_CASE("an operation of its own is named by its kind and backend, and its args say what it "
          "ran: the operation as messages describe it, dtype and bytes") {
  temp_dir dir;
  timeline tl{opts(dir / "tl.json")};
  hvactor::collectives::operation bc;
  bc.kind = op_kind::broadcast;
  bc.type = hvactor::hvd::dtype::float64;
  bc.count = 10;
  timeline_event e;
  e.set_operation(bc);
  e.set_backend("host-staged");
  int64_t t = timeline::now();
  tl.record(e, timeline_phase::op, t, t + 10);
  e.failed = true;
  tl.record(e, timeline_phase::op, t + 10, t + 20);
  hvactor::collectives::operation avg;
  avg.kind = op_kind::allreduce;
  avg.type = hvactor::hvd::dtype::float16;
  avg.count = 3;
  avg.reduction = hvactor::hvd::op::average;
  avg.device = true;
  timeline_event a;
  a.set_operation(avg);
  a.set_backend("nccl");
  tl.record(a, timeline_phase::op, t + 20, t + 30);
  tl.close();
  auto found = named(events(tl.path()), "HOST_STAGED_BROADCAST");
  REQUIRE(found.size() == 2);
  auto* args = found[0].find("args");
  CHECK(args->str("op") == "broadcast (float64 x 10, root 0)");
  CHECK(args->str("dtype") == "float64");
  CHECK(args->num("bytes") == 80);
  CHECK(args->find("failed") == nullptr);
  CHECK(found[1].find("args")->find("failed")->boolean);
  auto reduced = named(events(tl.path()), "NCCL_ALLREDUCE");
  REQUIRE(reduced.size() == 1);
  CHECK(reduced[0].find("args")->str("op") == "allreduce (device, float16 x 3, average)");
  CHECK(reduced[0].find("args")->num("bytes") == 6);
}

TEST_CASE("names with quotes, backslashes, control characters and bytes that are not UTF-8 are "
          "escaped") {
  using hvactor::collectives::json_escape;
  CHECK(json_escape("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(json_escape("x\ny\t\x01\x1f") == "x\\ny\\t\\u0001\\u001f");
  CHECK(json_escape("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(json_escape("bad\xff\xc3") == "bad\\ufffd\\ufffd");
  temp_dir dir;
  timeline tl{opts(dir / "tl.json")};
  std::string nasty = "q\"b\\s\nc\x02u\xe2\x82\xac";
  auto e = batch({nasty.c_str(), "bad\xfe"}, 4);
  int64_t t = timeline::now();
  tl.record(e, timeline_phase::op, t, t + 1);
  tl.close();
  auto found = named(events(tl.path()), "GLOO_ALLREDUCE");
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("args")->str("tensors") == nasty + ",bad\xef\xbf\xbd");
}

TEST_CASE("a batch's names are cut with \"...\" when they do not fit, never inside a UTF-8 "
          "character") {
  timeline_event e;
  std::string euro;
  for (int i = 0; i < 40; ++i)
    euro += "\xe2\x82\xac";
  e.add_name("first");
  e.add_name(euro);
  e.add_name("never");
  std::string names{e.names, e.names_length};
  CHECK(e.truncated);
  CHECK(names.size() <= sizeof(e.names) - 1);
  CHECK(names.rfind("first,\xe2\x82\xac", 0) == 0);
  CHECK(names.substr(names.size() - 3) == "...");
  CHECK((names.size() - 3 - 6) % 3 == 0); // whole characters only
  CHECK(names.find("never") == std::string::npos);
  CHECK_NOTHROW(json::parse("\"" + hvactor::collectives::json_escape(names) + "\""));
}

TEST_CASE("queue spans that overlap go to a second queue lane") {
  temp_dir dir;
  timeline tl{opts(dir / "tl.json")};
  auto e = batch({"a"}, 4);
  int64_t t = timeline::now();
  tl.record(e, timeline_phase::queue, t, t + 100);
  tl.record(e, timeline_phase::queue, t + 50, t + 200); // queued before the first ran
  tl.record(e, timeline_phase::queue, t + 300, t + 400);
  tl.close();
  auto evs = events(tl.path());
  auto queues = named(evs, "QUEUE");
  REQUIRE(queues.size() == 3);
  CHECK(queues[0].num("tid") == 1);
  CHECK(queues[1].num("tid") == 2);
  CHECK(queues[2].num("tid") == 1);
  CHECK(named(evs, "thread_name").size() == 3); // operations, queue, queue (lane 2)
}

TEST_CASE("events reach the file every flush interval, before close; the unclosed file is an "
          "unterminated array") {
  temp_dir dir;
  auto o = opts(dir / "tl.json");
  o.flush_interval = std::chrono::milliseconds{20};
  timeline tl{o};
  int64_t t = timeline::now();
  tl.record(batch({"early"}, 4), timeline_phase::op, t, t + 1);
  std::string text;
  for (int i = 0; i < 200 && text.find("early") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
    text = slurp(tl.path());
  }
  CHECK(text.find("early") != std::string::npos);
  CHECK_NOTHROW(json::parse(text + "\n]"));
  tl.close();
  CHECK_NOTHROW(events(tl.path()));
}

TEST_CASE("a full ring drops events instead of waiting, and the file says how many") {
  temp_dir dir;
  auto o = opts(dir / "tl.json");
  o.capacity = 8;
  o.flush_interval = std::chrono::seconds{30};
  timeline tl{o};
  int64_t t = timeline::now();
  for (int i = 0; i < 1000; ++i)
    tl.record(batch({"x"}, 4), timeline_phase::op, t + i, t + i + 1);
  tl.close();
  CHECK(tl.dropped() > 0);
  CHECK(tl.dropped() < 1000);
  auto evs = events(tl.path());
  auto kept = named(evs, "GLOO_ALLREDUCE").size();
  CHECK(kept + tl.dropped() == 1000);
  bool noted = false;
  for (auto& e : evs)
    noted = noted || e.str("name").find("events dropped") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("merge_timelines writes one valid array with the events of every input; a file cut "
          "short by a crash loses only its partial last line") {
  temp_dir dir;
  for (int r = 0; r < 2; ++r) {
    timeline tl{opts(dir / "tl.{rank}.json", r)};
    int64_t t = timeline::now();
    tl.record(batch({"g"}, 4), timeline_phase::op, t, t + 5);
  }
  // Rank 2 died mid-write: no closing bracket, half an event at the end.
  {
    timeline tl{opts(dir / "tl.{rank}.json", 2)};
    int64_t t = timeline::now();
    tl.record(batch({"g"}, 4), timeline_phase::op, t, t + 5);
    tl.close();
  }
  auto full = slurp(dir / "tl.2.json");
  auto cut = full.substr(0, full.rfind(']')) + ",\n{\"name\":\"GLOO_ALLRED";
  std::ofstream{dir / "tl.2.json", std::ios::trunc} << cut;
  auto inputs = hvactor::collectives::timeline_files(dir / "tl.{rank}.json", 3);
  hvactor::collectives::merge_timelines(inputs, dir / "merged.json");
  auto evs = events(dir / "merged.json");
  std::set<int> pids, op_pids;
  for (auto& e : evs) {
    pids.insert(static_cast<int>(e.num("pid")));
    if (e.str("name") == "GLOO_ALLREDUCE")
      op_pids.insert(static_cast<int>(e.num("pid")));
  }
  CHECK(pids == std::set<int>{0, 1, 2});
  CHECK(op_pids == std::set<int>{0, 1, 2});
  CHECK(named(evs, "process_name").size() == 3);
  CHECK_THROWS_AS(hvactor::collectives::merge_timelines({dir / "missing.json"}, dir / "m2.json"),
                  hvactor::error);
}

TEST_CASE("a second timeline on the same file in one process (init after shutdown) continues "
          "its array") {
  temp_dir dir;
  for (auto* tensor : {"first", "second"}) {
    timeline tl{opts(dir / "tl.json")};
    int64_t t = timeline::now();
    tl.record(batch({tensor}, 4), timeline_phase::op, t, t + 1);
  }
  auto evs = events(dir / "tl.json");
  auto ops = named(evs, "GLOO_ALLREDUCE");
  REQUIRE(ops.size() == 2);
  CHECK(ops[0].find("args")->str("tensors") == "first");
  CHECK(ops[1].find("args")->str("tensors") == "second");
}

TEST_CASE("a path that cannot be written fails with the path and the reason") {
  temp_dir dir;
  std::ofstream{dir / "file"} << "x";
  try {
    timeline tl{opts(dir / "file/tl.json", 1)};
    FAIL("no error");
  } catch (const hvactor::error& e) {
    std::string what = e.what();
    CHECK(what.find(dir / "file/tl.json.rank1") != std::string::npos);
    CHECK(what.find("HOROVOD_TIMELINE") != std::string::npos);
  }
}

TEST_CASE("the engine records QUEUE, NEGOTIATE, the fusion copies and the backend's allreduce "
          "for a fused batch, and each operation that runs alone") {
  namespace detail = hvactor::hvd::detail;
  namespace hvd = hvactor::hvd;
  temp_dir dir;
  timeline tl{opts(dir / "tl.json")};
  detail::engine_options eo;
  eo.timeline = &tl;
  eo.cycle_time = std::chrono::seconds{30}; // the batch closes when waited for
  hvactor::collectives::topology topo;
  topo.host = "node-a";
  {
    detail::engine eng{hvactor::collectives::make_local_backend(), topo, eo};
    // The engine thread's first heartbeat round runs as it starts; one that
    // ran between the two submits below would take grad/a alone. A barrier
    // first waits it out (the next heartbeat is a second away).
    eng.run({.kind = op_kind::barrier},
            [](hvactor::collectives::backend& be) { be.barrier(); });
    std::vector<float> a(16, 1.f), b(32, 2.f);
    hvactor::collectives::operation op;
    op.name = "grad/a";
    op.count = a.size();
    auto pa = eng.submit(op, a.data());
    op.name = "grad/b";
    op.count = b.size();
    auto pb = eng.submit(op, b.data());
    eng.wait(*pa);
    eng.wait(*pb);
    eng.run({.kind = op_kind::barrier},
            [](hvactor::collectives::backend& be) { be.barrier(); });
    eng.stop();
  }
  tl.close();
  auto evs = events(tl.path());
  for (std::string phase : {"QUEUE", "NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "LOCAL_ALLREDUCE",
                            "MEMCPY_OUT_FUSION_BUFFER"}) {
    CAPTURE(phase);
    auto found = named(evs, phase);
    // The barrier gets a QUEUE span of its own when it had to queue behind
    // the batch (the engine thread was still finishing it): not this one.
    if (phase == "QUEUE")
      std::erase_if(found, [](const auto& e) {
        auto* args = e.find("args");
        return args == nullptr || args->str("tensors") != "grad/a,grad/b";
      });
    REQUIRE(found.size() == 1);
    CHECK(found[0].find("args")->str("tensors") == "grad/a,grad/b");
    CHECK(found[0].find("args")->num("fused") == 2);
    CHECK(found[0].find("args")->num("bytes") == 192);
  }
  auto barrier = named(evs, "LOCAL_BARRIER");
  REQUIRE(barrier.size() == 2);
  for (auto& e : barrier)
    CHECK(e.find("args")->str("op") == "barrier");
}

TEST_CASE("hvd::init opens HOROVOD_TIMELINE's file and hvd::shutdown closes it; unset, no file") {
  namespace hvd = hvactor::hvd;
  temp_dir dir;
  hvd::shutdown();
  ::setenv("HOROVOD_TIMELINE", (dir / "tl.json").c_str(), 1);
  hvd::init();
  std::vector<double> x{1, 2, 3};
  hvd::allreduce(std::span<double>(x), hvd::op::sum);
  auto h = hvd::allreduce_async(std::span<double>(x), hvd::op::sum, "solo");
  hvd::synchronize(h);
  hvd::shutdown();
  ::unsetenv("HOROVOD_TIMELINE");
  auto evs = events(dir / "tl.json");
  CHECK(named(evs, "LOCAL_ALLREDUCE").size() == 2);
  CHECK(named(evs, "QUEUE").size() == 1);
  hvd::init();
  hvd::allreduce(std::span<double>(x), hvd::op::sum);
  hvd::shutdown();
  CHECK(fs::directory_iterator{dir.path} != fs::directory_iterator{});
  CHECK(std::distance(fs::directory_iterator{dir.path}, fs::directory_iterator{}) == 1);
}

} // TEST_SUITE
