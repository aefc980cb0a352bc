// HOROVOD_TIMELINE in real worker processes (2 and 4 ranks, started by an
// hvactor::executor): every rank writes its own Chrome trace file, named by
// the "{rank}" pattern or the rank-suffix rule, valid JSON once
// hvd::shutdown() returned, with its QUEUE spans, the fusion copies of a
// fused batch and the Gloo operations; merge_timelines() joins them.

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "../unit/mini_json.hpp"
#include "hvd_session.hpp"
#include "test_main.hpp"
#include "collectives/observe/timeline.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;
using hvactor::test::json;

namespace {

// --- Worker side -------------------------------------------------------------

/// One of each collective, three async allreduces fused into one batch (the
/// long cycle time closes it only at synchronize), then hvd::shutdown().
/// Returns what went wrong, "" when nothing did.
std::string traced_collectives() {
  std::string found;
  {
    hvactor::test::hvd_session s;
    std::vector<float> x(1000, 1.f);
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
    std::vector<std::vector<float>> grads{std::vector<float>(100, 1.f),
                                          std::vector<float>(200, 1.f),
                                          std::vector<float>(300, 1.f)};
    std::vector<hvd::handle> handles;
    for (size_t i = 0; i < grads.size(); ++i)
      handles.push_back(hvd::allreduce_async(std::span<float>(grads[i]), hvd::op::sum,
                                             "grad/" + std::to_string(i)));
    for (auto& h : handles)
      hvd::synchronize(h);
    std::vector<int32_t> mine(3, hvd::rank());
    auto all = hvd::allgather(std::span<const int32_t>(mine));
    std::vector<double> root(4, hvd::rank() == 0 ? 7.0 : 0.0);
    hvd::broadcast(std::span<double>(root), 0);
    if (x[0] != static_cast<float>(hvd::size()) || grads[2][299] != x[0])
      found += "wrong allreduce sums; ";
    if (all.size() != mine.size() * static_cast<size_t>(hvd::size()) || root[3] != 7.0)
      found += "wrong allgather or broadcast; ";
  }
  if (hvd::is_initialized())
    found += "still initialized after shutdown; ";
  return found;
}

/// hvd::start_timeline / stop_timeline at run time (issue 31): an allreduce
/// before start (not recorded), a reducescatter and 3 async allreduces
/// while recording with cycle marks, an allgather after stop (not
/// recorded); then a second start into another file and a stop.
std::string dynamic_timeline(std::string dir) {
  hvactor::test::hvd_session s;
  std::vector<float> x(64, 1.f);
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  hvd::start_timeline(dir + "/dyn.{rank}.json", true);
  auto part = hvd::reducescatter(std::span<const float>(x), hvd::op::sum);
  std::vector<std::vector<float>> g(3, std::vector<float>(50, 1.f));
  std::vector<hvd::handle> hs;
  for (size_t i = 0; i < g.size(); ++i)
    hs.push_back(hvd::allreduce_async(std::span<float>(g[i]), hvd::op::sum, "dyn/" + std::to_string(i)));
  for (auto& h : hs)
    hvd::synchronize(h);
  hvd::stop_timeline();
  hvd::stop_timeline(); // nothing running: nothing happens
  std::vector<int32_t> mine(2, hvd::rank());
  hvd::allgather(std::span<const int32_t>(mine));
  hvd::start_timeline(dir + "/again.{rank}.json");
  hvd::barrier();
  hvd::stop_timeline();
  try {
    hvd::start_timeline("/proc/no-such-dir/tl.json");
    return "start_timeline into /proc: no error";
  } catch (const hvactor::error&) {
  }
  return part.size() == x.size() / static_cast<size_t>(hvd::size()) ? "" : "wrong part size";
}

// --- Driver side -------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The file's events, parsed strictly.
std::vector<json> parse_events(const std::string& path) {
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(slurp(path)));
  REQUIRE(doc.type == json::kind::array);
  return doc.items;
}

std::map<std::string, int> count_names(const std::vector<json>& evs) {
  std::map<std::string, int> out;
  for (auto& e : evs)
    ++out[e.str("name")];
  return out;
}

/// A fresh directory, removed at scope exit.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::string tmpl =
      (std::filesystem::temp_directory_path() / "hvactor-timeline-it-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// Runs traced_collectives on `n` workers with HOROVOD_TIMELINE=`pattern`
/// and checks every rank's file and their merge.
/// `shm`: the ranks share their node's memory (the fused batch is reduced
/// in place, no fusion buffer: SHM_ALLREDUCE spans), else HVACTOR_SHM=0
/// (Gloo through the fusion buffer: MEMCPY_IN/OUT spans around GLOO_...).
void check_job(int n, const std::string& pattern, const std::filesystem::path& dir, bool shm) {
  hvactor::executor ex{test_runtime(),
                       hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s}),
                       {.num_workers = n,
                        .extra_env_vars = {{"HOROVOD_TIMELINE", pattern},
                                           {"HOROVOD_CYCLE_TIME", "2000"},
                                           {"HVACTOR_SHM", shm ? "1" : "0"}}}};
  const std::string op = shm ? "SHM_" : "GLOO_";
  ex.start();
  auto reports = ex.run(&traced_collectives);
  ex.shutdown();
  REQUIRE(reports.size() == static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(reports[static_cast<size_t>(r)].empty(), reports[static_cast<size_t>(r)]);
  }
  auto files = hvactor::collectives::timeline_files(pattern, n);
  for (int r = 0; r < n; ++r) {
    auto& file = files[static_cast<size_t>(r)];
    CAPTURE(file);
    REQUIRE(std::filesystem::exists(file));
    auto evs = parse_events(file);
    std::set<int> pids;
    bool fused_copy = false, named_row = false;
    for (auto& e : evs) {
      pids.insert(static_cast<int>(e.num("pid")));
      auto* args = e.find("args");
      if (e.str("name") == (shm ? op + "ALLREDUCE" : "MEMCPY_IN_FUSION_BUFFER") && args
          && args->num("fused") == 3
          && args->str("tensors") == "grad/0,grad/1,grad/2" && args->num("bytes") == 2400)
        fused_copy = true;
      if (e.str("name") == "process_name" && args
          && args->str("name").rfind("rank " + std::to_string(r) + " (", 0) == 0)
        named_row = true;
    }
    CHECK(pids == std::set<int>{r});
    CHECK(named_row);
    CHECK(fused_copy); // the fused batch's span names its 3 tensors
    auto names = count_names(evs);
    CHECK(names["QUEUE"] >= 1);
    CHECK(names["NEGOTIATE"] >= 1);
    CHECK(names["MEMCPY_OUT_FUSION_BUFFER"] == (shm ? 0 : names["MEMCPY_IN_FUSION_BUFFER"]));
    CHECK(names[op + "ALLREDUCE"] >= 2); // the synchronous one and the fused batch
    CHECK(names[op + "ALLGATHER"] == 1);
    CHECK(names[op + "BROADCAST"] == 1);
  }
  auto merged = (dir / "merged.json").string();
  hvactor::collectives::merge_timelines(files, merged);
  std::set<int> pids;
  for (auto& e : parse_events(merged))
    if (e.str("name") == op + "ALLREDUCE")
      pids.insert(static_cast<int>(e.num("pid")));
  REQUIRE(pids.size() == static_cast<size_t>(n));
  CHECK(*pids.begin() == 0);
  CHECK(*pids.rbegin() == n - 1);
}

} // namespace

TEST_SUITE("timeline") {

TEST_CASE("with HOROVOD_TIMELINE=<dir>/tl.{rank}.json every rank of 2 and 4 writes a valid "
          "trace of its collectives, and the merge holds every rank") {
  for (int n : {2, 4})
    for (bool shm : {true, false}) {
      CAPTURE(n);
      CAPTURE(shm);
      temp_dir dir;
      check_job(n, (dir.path / "tl.{rank}.json").string(), dir.path, shm);
    }
}

TEST_CASE("with HOROVOD_TIMELINE=<dir>/tl.json rank 0 writes tl.json and rank r tl.json.rank<r>") {
  temp_dir dir;
  check_job(4, (dir.path / "tl.json").string(), dir.path, true);
  CHECK(std::filesystem::exists(dir.path / "tl.json.rank3"));
}

TEST_CASE("hvd::start_timeline / stop_timeline record only between the calls, with CYCLE_START "
          "marks when asked; HOROVOD_TIMELINE_MARK_CYCLES marks them from init") {
  temp_dir dir;
  {
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2}};
    ex.start();
    for (auto& r : ex.run(&dynamic_timeline, dir.path.string()))
      CHECK_MESSAGE(r.empty(), r);
    ex.shutdown();
  }
  for (int r : {0, 1}) {
    CAPTURE(r);
    auto names = count_names(parse_events((dir.path / ("dyn." + std::to_string(r) + ".json")).string()));
    CHECK(names["CYCLE_START"] >= 1);
    CHECK(names["SHM_REDUCESCATTER"] == 1);
    CHECK(names["SHM_ALLREDUCE"] >= 1);
    CHECK(names.count("SHM_ALLGATHER") == 0); // after stop_timeline
    auto again = count_names(parse_events((dir.path / ("again." + std::to_string(r) + ".json")).string()));
    CHECK(again["SHM_BARRIER"] == 1);
    CHECK(again.count("CYCLE_START") == 0);
  }
  // From init, through the environment; a bad value fails init naming it.
  {
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2,
                          .extra_env_vars = {{"HOROVOD_TIMELINE", (dir.path / "env.{rank}.json").string()},
                                             {"HOROVOD_TIMELINE_MARK_CYCLES", "1"}}}};
    ex.start();
    ex.run(&traced_collectives);
    ex.shutdown();
    CHECK(count_names(parse_events((dir.path / "env.1.json").string()))["CYCLE_START"] >= 1);
  }
  {
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2,
                          .extra_env_vars = {{"HOROVOD_TIMELINE_MARK_CYCLES", "yes"}}}};
    ex.start();
    try {
      ex.run(&traced_collectives);
      CHECK_MESSAGE(false, "HOROVOD_TIMELINE_MARK_CYCLES=yes: no error");
    } catch (const hvactor::error& e) {
      CHECK(std::string{e.what()}.find("HOROVOD_TIMELINE_MARK_CYCLES='yes'") != std::string::npos);
    }
    ex.shutdown();
  }
}

} // TEST_SUITE
