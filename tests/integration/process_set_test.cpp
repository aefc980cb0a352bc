// Horovod's process sets between real worker processes (issue 31): two
// sets run their own collectives concurrently with the job's, with exact
// results, over shared memory and over Gloo, at 3 and 4 ranks; sets added
// and removed while another set's collectives run; every refusal (not a
// member, removed set, duplicate, ranks that differ between ranks, no
// HOROVOD_DYNAMIC_PROCESS_SETS); ranks that add or remove different sets
// all get the same refusal and stay alike; a member SIGKILLed while the
// others wait in the set's allreduce fails them fast, each naming it.

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hvactor/hvactor.hpp>

#include "hvd_session.hpp"
#include "peer_death.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

// What went wrong, one line per finding ("" when nothing did).
struct findings {
  std::ostringstream out;
  void check(bool ok, const std::string& what) {
    if (!ok)
      out << what << "\n";
  }
  std::string text() const {
    return out.str();
  }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

int job_size() {
  return std::atoi(std::getenv("HOROVOD_SIZE"));
}

// Every collective on `ps` (this rank a member), with values that depend
// on the global rank, so that a part from the wrong rank or set shows.
void on_set(const hvd::process_set& ps, int round, findings& f) {
  const int me = hvd::rank();
  const auto& members = ps.ranks();
  const auto k = static_cast<size_t>(members.size());
  auto tag = fmt::format("{} round {}", ps.to_string(), round);
  f.check(ps.rank() >= 0 && members[static_cast<size_t>(ps.rank())] == me, tag + ": rank()");
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{70001}}) {
    std::vector<int32_t> x(n);
    for (size_t i = 0; i < n; ++i)
      x[i] = (me + 1) * static_cast<int32_t>(i % 1000 + 1);
    hvd::allreduce(ps, std::span(x), hvd::op::sum);
    int32_t members_sum = 0;
    for (int r : members)
      members_sum += r + 1;
    bool ok = true;
    for (size_t i = 0; i < n; ++i)
      ok = ok && x[i] == members_sum * static_cast<int32_t>(i % 1000 + 1);
    f.check(ok, fmt::format("{}: allreduce sum of {} int32", tag, n));
    std::vector<float> y(n, static_cast<float>(me));
    hvd::allreduce(ps, std::span(y), hvd::op::average);
    float mean = 0;
    for (int r : members)
      mean += static_cast<float>(r);
    mean /= static_cast<float>(k);
    f.check(std::abs(y[n - 1] - mean) < 1e-4f, fmt::format("{}: average of {} float", tag, n));
  }
  // allgather: rank r sends r + 1 copies of r; the parts in member order.
  std::vector<int64_t> mine(static_cast<size_t>(me + 1), me), want;
  for (int r : members)
    want.insert(want.end(), static_cast<size_t>(r + 1), r);
  f.check(hvd::allgather(ps, std::span<const int64_t>(mine)) == want, tag + ": allgather");
  // broadcast from the last member (a global rank).
  int root = members.back();
  std::vector<double> b(33, me == root ? 0.0 : -1.0);
  if (me == root)
    std::iota(b.begin(), b.end(), 100.0 * root);
  hvd::broadcast(ps, std::span(b), root);
  f.check(b[32] == 100.0 * root + 32, tag + ": broadcast from global rank " + std::to_string(root));
  // alltoall: member j gets me * 10 + j from me.
  std::vector<int32_t> sends(k);
  for (size_t j = 0; j < k; ++j)
    sends[j] = me * 10 + static_cast<int32_t>(j);
  auto got = hvd::alltoall(ps, std::span<const int32_t>(sends));
  bool ok = got.size() == k;
  for (size_t j = 0; ok && j < k; ++j)
    ok = got[j] == members[j] * 10 + ps.rank();
  f.check(ok, tag + ": alltoall");
  // reducescatter: 2k + 1 elements, i + rank each.
  std::vector<int64_t> rs(2 * k + 1);
  for (size_t i = 0; i < rs.size(); ++i)
    rs[i] = static_cast<int64_t>(i) + me;
  auto part = hvd::reducescatter(ps, std::span<const int64_t>(rs), hvd::op::sum);
  auto first = 2 * static_cast<size_t>(ps.rank()) + std::min<size_t>(static_cast<size_t>(ps.rank()), 1);
  int64_t rank_sum = std::accumulate(members.begin(), members.end(), int64_t{0});
  ok = part.size() == (ps.rank() == 0 ? 3u : 2u);
  for (size_t i = 0; ok && i < part.size(); ++i)
    ok = part[i] == static_cast<int64_t>(k * (first + i)) + rank_sum;
  f.check(ok, tag + ": reducescatter");
  // Named async allreduces, submitted in opposite orders by odd and even ranks.
  std::vector<std::vector<float>> g(3, std::vector<float>(257, static_cast<float>(me)));
  std::vector<hvd::handle> hs;
  for (int i = 0; i < 3; ++i) {
    int j = me % 2 == 0 ? i : 2 - i;
    hs.push_back(hvd::allreduce_async(ps, std::span(g[static_cast<size_t>(j)]), hvd::op::sum,
                                      "grad." + std::to_string(j)));
  }
  for (auto& h : hs)
    hvd::synchronize(h);
  f.check(g[2][256] == static_cast<float>(rank_sum), tag + ": async allreduces paired by name");
  hvd::barrier(ps);
}

// The job's own allreduces, run by every rank meanwhile.
void on_job(int rounds, findings& f) {
  int n = hvd::size();
  for (int i = 0; i < rounds; ++i) {
    std::vector<int64_t> x(1000, hvd::rank());
    hvd::allreduce(std::span(x), hvd::op::sum);
    f.check(x[999] == int64_t{n} * (n - 1) / 2, fmt::format("job allreduce {}", i));
  }
}

// Static sets of the even and the odd ranks, each running its collectives
// while another thread runs the job's; returns the set's backend_info,
// "|", then the findings.
std::string static_sets(int rounds) {
  std::vector<int> even, odd;
  for (int r = 0; r < job_size(); ++r)
    (r % 2 == 0 ? even : odd).push_back(r);
  hvd::process_set evens(even), odds(odd);
  hvd::init({&evens, &odds});
  findings f, job;
  std::string info;
  try {
    auto& mine = evens.included() ? evens : odds;
    f.check(evens.id() == 1 && odds.id() == 2, "ids " + evens.to_string() + odds.to_string());
    {
      hvd::process_set_scope on{mine};
      info = hvd::backend_info();
    }
    std::thread other([&] { on_job(rounds * 4, job); });
    for (int i = 0; i < rounds; ++i)
      on_set(mine, i, f);
    other.join();
  } catch (const std::exception& e) {
    f.check(false, std::string("threw: ") + e.what());
  }
  hvd::shutdown();
  return info + "|" + f.text() + job.text();
}

void on_3_and_4_ranks(const std::map<std::string, std::string>& env, const std::string& path) {
  for (int n : {3, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 20s,
                                                             .placement_timeout = 20s}),
                         {.num_workers = n, .extra_env_vars = env}};
    ex.start();
    auto reports = ex.run(&static_sets, 3);
    REQUIRE(reports.size() == static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      auto& rep = reports[static_cast<size_t>(r)];
      CAPTURE(r);
      CAPTURE(rep);
      auto bar = rep.find('|');
      REQUIRE(bar != std::string::npos);
      CHECK(rep.substr(bar + 1).empty());
      // n = 3: the odd set is rank 1 alone.
      bool alone = n == 3 && r == 1;
      if (!alone)
        CHECK(rep.rfind("allreduce: " + path, 0) == 0);
    }
    ex.shutdown();
  }
}

// Sets added and removed (HOROVOD_DYNAMIC_PROCESS_SETS) while ranks 0 and
// 1 run a set's collectives in another thread; then every refusal.
std::string dynamic_sets(int rounds) {
  findings f;
  hvd::init({}, true);
  int n = hvd::size(), me = hvd::rank();
  try {
    auto pair = hvd::add_process_set({1, 0});
    f.check(pair.ranks() == std::vector<int>{0, 1} && pair.id() == 1, "first set " + pair.to_string());
    findings busy;
    // A fixed number of rounds: both members must make the same calls.
    std::thread t([&] {
      if (!pair.included())
        return;
      for (int i = 0; i < 2 * rounds; ++i)
        on_set(pair, i, busy);
    });
    for (int i = 0; i < rounds; ++i) {
      std::vector<int> ranks;
      for (int r = 1; r < n; ++r)
        if ((r + i) % 2 == 1 || r == n - 1)
          ranks.push_back(r);
      auto ps = hvd::add_process_set(ranks);
      f.check(ps.id() == 2 + i, "id of " + ps.to_string());
      if (ps.included())
        on_set(ps, i, f);
      auto copy = ps;
      f.check(hvd::remove_process_set(ps) && ps.id() == -1, "remove " + copy.to_string());
      if (copy.included()) {
        std::vector<float> x(4);
        f.check(contains(error_of([&] { hvd::allreduce(copy, std::span(x)); }), "does not exist"),
                "a removed set's allreduce");
      }
    }
    t.join();
    f.check(busy.text().empty(), busy.text());
    // Refusals, on every rank alike.
    std::vector<float> x(8, 1.0f);
    if (!pair.included())
      f.check(contains(error_of([&] { hvd::allreduce(pair, std::span(x)); }),
                       fmt::format("rank {} is not a member of process set 1 (ranks 0, 1)", me)),
              "a non-member's allreduce");
    f.check(contains(error_of([] { hvd::add_process_set({0, 1}); }), "duplicate process set"),
            "a duplicate set");
    f.check(contains(error_of([] { hvd::add_process_set({0, 0}); }), "twice"), "a rank twice");
    f.check(contains(error_of([&] { hvd::add_process_set({0, n}); }), "not all ranks"),
            "a rank out of range");
    f.check(contains(error_of([] { hvd::add_process_set(std::vector<int>{}); }), "at least one"),
            "an empty set");
    f.check(contains(error_of([&] { hvd::add_process_set({me}); }), "every rank must pass the same"),
            "ranks that differ between ranks");
    auto global = hvd::global_process_set();
    f.check(!hvd::remove_process_set(global), "removing the global set");
    f.check(hvd::process_sets().size() == 2, "process_sets() lists the global set and the pair");
    on_job(2, f); // the job's collectives still work after all that
  } catch (const std::exception& e) {
    f.check(false, std::string("threw: ") + e.what());
  }
  hvd::shutdown();
  // Without HOROVOD_DYNAMIC_PROCESS_SETS, adding after init is refused.
  hvd::init();
  f.check(contains(error_of([] { hvd::add_process_set({0}); }), "HOROVOD_DYNAMIC_PROCESS_SETS=1"),
          "adding without dynamic process sets");
  hvd::shutdown();
  return f.text();
}

// Rank 0 adds ranks {0, 1}, already process set 1, while the others add
// {0, 1, 2}, a new set; then rank 0 removes set 1 while the others remove
// set 2. Returns the two refusals and the findings, "|" between them.
std::string differing_sets() {
  findings f;
  hvd::init({}, true);
  int me = hvd::rank();
  std::string added, removed;
  try {
    auto pair = hvd::add_process_set({0, 1});
    added = error_of([&] {
      hvd::add_process_set(me == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2});
    });
    on_job(2, f); // the job's next collectives pair as before
    f.check(hvd::process_sets().size() == 2, "sets after the refused add");
    auto all = hvd::add_process_set({0, 1, 2});
    f.check(all.id() == 2, "the next set's id: " + all.to_string());
    if (all.included())
      on_set(all, 0, f);
    auto& removing = me == 0 ? pair : all;
    removed = error_of([&] { hvd::remove_process_set(removing); });
    f.check(removing.id() > 0, "the refused removal kept the set's id");
    f.check(hvd::process_sets().size() == 3, "sets after the refused removal");
    on_job(2, f);
    if (pair.included())
      on_set(pair, 1, f);
    f.check(hvd::remove_process_set(pair) && hvd::remove_process_set(all),
            "the same removals on every rank");
    f.check(hvd::process_sets().size() == 1, "sets after the removals");
  } catch (const std::exception& e) {
    f.check(false, std::string("threw: ") + e.what());
  }
  hvd::shutdown();
  return added + "|" + removed + "|" + f.text();
}

// Ranks first..first+n-2 form a set; rank n-2 dies while the others wait in
// the set's allreduce; the rank outside the set waits in the job's barrier.
void set_member_dies_in(const std::string& dir, int first) {
  hvd::init({}, true);
  int n = hvd::size(), me = hvd::rank(), victim = n - 2;
  std::vector<int> ranks(static_cast<size_t>(n - 1));
  std::iota(ranks.begin(), ranks.end(), first);
  auto ps = hvd::add_process_set(ranks);
  if (me == victim) {
    std::this_thread::sleep_for(300ms);
    hvactor::test::die_now(dir);
  }
  std::string outcome = "no error";
  try {
    if (ps.included()) {
      for (;;) {
        std::vector<float> x(1000, 1.0f);
        hvd::allreduce(ps, std::span(x));
      }
    } else {
      std::this_thread::sleep_for(100ms);
      hvd::barrier();
    }
  } catch (const std::exception& e) {
    outcome = e.what();
  }
  hvactor::test::report_failure(dir, me, outcome);
}

void set_member_dies(std::string dir) {
  set_member_dies_in(dir, 0);
}

// The set is ranks 1..n-1: its own numbering differs from the job's.
void set_member_dies_from_1(std::string dir) {
  set_member_dies_in(dir, 1);
}

struct temp_dir {
  std::filesystem::path path;
  temp_dir()
    : path(std::filesystem::temp_directory_path()
           / ("hvactor-process-set-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

} // namespace

TEST_SUITE("process sets") {

TEST_CASE("two static sets run their collectives concurrently with the job's, exactly, over "
          "shared memory") {
  on_3_and_4_ranks({}, "shm");
}

TEST_CASE("the same over Gloo") {
  on_3_and_4_ranks({{"HVACTOR_SHM", "0"}}, "gloo");
}

TEST_CASE("sets are added and removed while another set's collectives run; refusals name the "
          "set") {
  hvactor::executor ex{test_runtime(),
                       hvactor::executor::create_settings({.timeout = 20s,
                                                           .placement_timeout = 20s}),
                       {.num_workers = 4}};
  ex.start();
  auto reports = ex.run(&dynamic_sets, 3);
  for (size_t r = 0; r < reports.size(); ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(reports[r].empty(), reports[r]);
  }
  ex.shutdown();
}

TEST_CASE("ranks that add or remove different sets all get the same refusal, naming what each "
          "passed, and go on alike") {
  hvactor::executor ex{test_runtime(),
                       hvactor::executor::create_settings({.timeout = 20s,
                                                           .placement_timeout = 20s}),
                       {.num_workers = 3}};
  ex.start();
  auto reports = ex.run(&differing_sets);
  REQUIRE(reports.size() == 3);
  for (size_t r = 0; r < reports.size(); ++r) {
    CAPTURE(r);
    CAPTURE(reports[r]);
    CHECK(reports[r].substr(0, reports[r].rfind('|')) == reports[0].substr(0, reports[0].rfind('|')));
    CHECK(reports[r].ends_with("|"));
  }
  auto& report = reports[0];
  CHECK(contains(report, "hvd::add_process_set: every rank must pass the same ranks: rank 0 "
                         "passed 0, 1 (process set 1 there), ranks 1, 2 passed 0, 1, 2"));
  CHECK(contains(report, "hvd::remove_process_set: every rank must remove the same process set: "
                         "rank 0 passed process set 1 (ranks 0, 1), ranks 1, 2 passed process "
                         "set 2 (ranks 0, 1, 2)"));
  ex.shutdown();
}

TEST_CASE("a member that dies fails the set's other members, and the job, fast, each naming it; "
          "three times over shared memory and over Gloo") {
  for (const char* shm : {"1", "0"})
    for (int run = 0; run < 3; ++run) {
      CAPTURE(shm);
      CAPTURE(run);
      temp_dir dir;
      hvactor::executor ex{test_runtime(),
                           hvactor::executor::create_settings({.timeout = 20s,
                                                               .placement_timeout = 20s}),
                           {.num_workers = 4, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
      ex.start();
      CHECK_THROWS_AS(ex.run(&set_member_dies, dir.path.string()), hvactor::worker_error);
      hvactor::test::check_survivors_failed(dir.path, {0, 1, 3}, 5s);
      // The victim is rank 2; no survivor blames another.
      for (int r : {0, 1, 3}) {
        CAPTURE(r);
        std::ifstream in{dir.path / ("rank-" + std::to_string(r))};
        std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        CAPTURE(text);
        CHECK(contains(text, "peer rank 2"));
        for (int other : {0, 1, 3})
          CHECK_FALSE(contains(text, "peer rank " + std::to_string(other)));
      }
      ex.shutdown();
    }
}

TEST_CASE("in a set numbered apart from the job (ranks 1, 2, 3), the survivors name the dead "
          "member by its rank in the job") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    temp_dir dir;
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 20s,
                                                             .placement_timeout = 20s}),
                         {.num_workers = 4, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    CHECK_THROWS_AS(ex.run(&set_member_dies_from_1, dir.path.string()), hvactor::worker_error);
    hvactor::test::check_survivors_failed(dir.path, {0, 1, 3}, 5s);
    // Job rank 2 (the set's rank 1) died; set members 1 and 3 say so.
    for (int r : {1, 3}) {
      CAPTURE(r);
      std::ifstream in{dir.path / ("rank-" + std::to_string(r))};
      std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      CAPTURE(text);
      CHECK(contains(text, "the peer is job rank 2"));
      CHECK(contains(text, "process set of job ranks 1, 2, 3"));
    }
    ex.shutdown();
  }
}

} // TEST_SUITE
