// Negotiation by name as plain code: several negotiators (one per simulated
// rank) run rounds against each other, their exchanges computed here (the
// header's elementwise min, the allgather of strings). Whatever order and
// timing the ranks submit in, every rank runs the same operations in the
// same order, each exactly once; a name with two shapes fails everywhere;
// the response cache (any capacity, evicting) changes nothing but the cost.

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>

#include "internal/negotiator.hpp"

namespace co = hvactor::collectives;
namespace hvd = hvactor::hvd;

namespace {

co::operation named(std::string name, size_t count, hvd::dtype t = hvd::dtype::float32) {
  co::operation op;
  op.kind = co::op_kind::allreduce;
  op.count = count;
  op.type = t;
  op.name = std::move(name);
  return op;
}

/// Ranks that run rounds together; ids are per rank, names what they ran.
struct world {
  std::vector<co::negotiator> ranks;
  std::vector<std::map<uint64_t, std::string>> names;
  std::vector<std::vector<std::string>> ran;
  std::vector<std::vector<std::string>> failed;
  std::vector<uint64_t> next_id;
  int rounds = 0;
  size_t header_words = 0;

  world(int n, size_t capacity) : names(n), ran(n), failed(n), next_id(n, 1) {
    for (int r = 0; r < n; ++r)
      ranks.emplace_back(r, n, "host", capacity);
  }

  void submit(int r, co::operation op, bool lane = false) {
    auto id = next_id[r]++;
    if (lane)
      op.name = co::negotiator::noname(op.kind, id); // per-rank call order
    names[r][id] = op.name;
    ranks[r].add(id, op, lane);
  }

  static std::vector<int64_t> min_of(const std::vector<std::vector<int64_t>>& all) {
    auto out = all[0];
    for (auto& v : all) {
      REQUIRE(v.size() == out.size());
      for (size_t i = 0; i < v.size(); ++i)
        out[i] = std::min(out[i], v[i]);
    }
    return out;
  }

  void round(int aborting = -1) {
    ++rounds;
    size_t n = ranks.size();
    std::vector<std::vector<int64_t>> headers;
    for (size_t r = 0; r < n; ++r)
      headers.push_back(ranks[r].propose(static_cast<int>(r) == aborting));
    header_words = headers[0].size();
    auto reduced = min_of(headers);
    std::vector<co::negotiator::plan> plans;
    for (auto& neg : ranks)
      plans.push_back(neg.read(reduced));
    for (size_t r = 1; r < n; ++r) {
      REQUIRE(plans[r].names == plans[0].names);
      REQUIRE(plans[r].lane_prefix == plans[0].lane_prefix);
    }
    if (plans[0].lane_prefix) {
      std::vector<std::vector<int64_t>> prefixes;
      for (auto& neg : ranks)
        prefixes.push_back(neg.lane_prefix());
      auto p = min_of(prefixes);
      bool explain = false;
      for (auto& neg : ranks)
        explain = neg.read_lane_prefix(p);
      if (explain) {
        std::vector<std::string> lists;
        for (auto& neg : ranks)
          lists.push_back(neg.lane_list());
        for (auto& neg : ranks)
          neg.explain_lane(lists);
      }
    }
    if (plans[0].names) {
      std::vector<std::string> all;
      for (auto& neg : ranks)
        all.push_back(neg.announcements());
      for (auto& neg : ranks)
        neg.learn(all);
    }
    for (size_t r = 0; r < n; ++r) {
      auto res = ranks[r].finish(std::make_exception_ptr(hvactor::collective_error("aborted")));
      for (auto id : res.ready)
        ran[r].push_back(names[r].at(id));
      for (auto& [id, err] : res.failed) {
        try {
          std::rethrow_exception(err);
        } catch (const std::exception& e) {
          failed[r].push_back(names[r].at(id) + ": " + e.what());
        }
      }
    }
  }

  bool idle() const {
    return std::all_of(ranks.begin(), ranks.end(), [](auto& n) { return n.idle(); });
  }
};

} // namespace

TEST_SUITE("negotiator") {

TEST_CASE("two ranks that submit the same names in opposite orders run each name once, in one "
          "order") {
  for (size_t capacity : {size_t{0}, size_t{1024}}) {
    world w{2, capacity};
    w.submit(0, named("grad.a", 4));
    w.submit(0, named("grad.b", 8));
    w.submit(1, named("grad.b", 8));
    w.submit(1, named("grad.a", 4));
    w.round();
    CHECK(w.idle());
    CHECK(w.ran[0] == w.ran[1]);
    CHECK(w.ran[0].size() == 2);
  }
}

TEST_CASE("a name waits for the rank that has not submitted it") {
  world w{3, 16};
  w.submit(0, named("x", 4));
  w.submit(1, named("x", 4));
  w.round();
  CHECK(w.ran[0].empty());
  CHECK(!w.ranks[0].idle());
  auto waiting = w.ranks[0].pending();
  REQUIRE(waiting.size() == 1);
  CHECK(waiting[0].name == "x");
  CHECK(waiting[0].missing == std::vector<int>{2});
  w.submit(2, named("x", 4));
  w.round();
  CHECK(w.idle());
  for (int r = 0; r < 3; ++r)
    CHECK(w.ran[r] == std::vector<std::string>{"x"});
}

TEST_CASE("once cached, a name is agreed by its slot's word without announcing it") {
  world w{2, 8};
  for (int step = 0; step < 3; ++step) {
    w.submit(0, named("g1", 4));
    w.submit(0, named("g2", 4));
    w.submit(1, named("g2", 4));
    w.submit(1, named("g1", 4));
    w.round();
    CHECK(w.idle());
    if (step > 0) {
      // The cached names produce nothing to announce.
      CHECK(w.ranks[0].announcements().size() <= 8);
    }
  }
  CHECK(w.ranks[0].cache().size() == 2);
  CHECK(w.header_words == co::negotiator::fixed_words + 2);
  CHECK(w.ran[0] == w.ran[1]);
}

TEST_CASE("the same name with two shapes fails on every rank, naming both ranks and sizes, "
          "also when it was cached with one of them") {
  for (size_t capacity : {size_t{0}, size_t{4}}) {
    world w{3, capacity};
    for (int r = 0; r < 3; ++r)
      w.submit(r, named("w", 10));
    w.round();
    REQUIRE(w.idle());
    for (int r = 0; r < 3; ++r)
      w.submit(r, named("w", r == 2 ? 11 : 10));
    for (int i = 0; i < 3 && !w.idle(); ++i)
      w.round();
    CHECK(w.idle());
    for (int r = 0; r < 3; ++r) {
      REQUIRE(w.failed[r].size() == 1);
      auto& what = w.failed[r][0];
      CAPTURE(what);
      CHECK(what.find("Mismatched allreduce tensor sizes") != std::string::npos);
      CHECK(what.find("rank 0 sent a tensor 'w' of 10 elements") != std::string::npos);
      CHECK(what.find("rank 2 sent one of 11") != std::string::npos);
    }
  }
}

TEST_CASE("unnamed operations pair by call order and fail together when their shapes differ") {
  world w{2, 16};
  w.submit(0, named("", 4), true);
  w.submit(1, named("", 4), true);
  w.round();
  CHECK(w.ran[0] == w.ran[1]);
  CHECK(w.ran[0].size() == 1);
  w.submit(0, named("", 4), true);
  w.submit(1, named("", 5), true);
  w.round();
  REQUIRE(w.failed[0].size() == 1);
  REQUIRE(w.failed[1].size() == 1);
  CHECK(w.failed[1][0].find("rank 0 sent a tensor of 4 elements") != std::string::npos);
  // A rank with a longer run waits for the other's.
  w.submit(0, named("", 4), true);
  w.submit(0, named("", 4), true);
  w.submit(1, named("", 4), true);
  w.round();
  CHECK(w.ran[0].size() == 2);
  CHECK(!w.ranks[0].idle());
  w.submit(1, named("", 4), true);
  w.round();
  CHECK(w.idle());
  CHECK(w.ran[0].size() == 3);
}

TEST_CASE("an abort fails everything pending on every rank, and the ranks go on together") {
  world w{2, 16};
  w.submit(0, named("a", 4));
  w.submit(1, named("b", 4));
  w.submit(0, named("", 4), true);
  w.round();
  w.round(1);
  CHECK(w.idle());
  CHECK(w.failed[0].size() == 2);
  CHECK(w.failed[1].size() == 1);
  w.submit(0, named("", 4), true);
  w.submit(1, named("", 4), true);
  w.submit(0, named("a", 4));
  w.submit(1, named("a", 4));
  w.round();
  CHECK(w.idle());
  CHECK(w.ran[0] .size() == 2);
  CHECK(w.ran[1].size() == 2);
}

TEST_CASE("after any interleaving of submissions and rounds, every rank ran the same sequence, "
          "each name once, whatever the cache's capacity") {
  for (int seed = 0; seed < 60; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    int n = 2 + seed % 3;
    size_t capacity = std::vector<size_t>{0, 3, 1024}[static_cast<size_t>(seed) % 3];
    CAPTURE(seed);
    CAPTURE(n);
    CAPTURE(capacity);
    world w{n, capacity};
    for (int step = 0; step < 4; ++step) {
      // Each rank: the same 30 names in its own order, plus 5 unnamed ones.
      std::vector<std::vector<co::operation>> order(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < 30; ++i)
          order[r].push_back(named("t" + std::to_string(i), 1 + static_cast<size_t>(i % 7),
                                   i % 2 ? hvd::dtype::float64 : hvd::dtype::int32));
        std::shuffle(order[r].begin(), order[r].end(), rng);
        for (int i = 0; i < 5; ++i)
          order[r].insert(order[r].begin() + static_cast<long>(rng() % order[r].size()),
                          named("", 3));
      }
      std::vector<size_t> at(static_cast<size_t>(n), 0);
      while (!std::all_of(at.begin(), at.end(), [](size_t i) { return i == 35; }) || !w.idle()) {
        for (int r = 0; r < n; ++r) {
          size_t burst = rng() % 6;
          for (size_t k = 0; k < burst && at[r] < 35; ++k, ++at[r]) {
            auto& op = order[r][at[r]];
            w.submit(r, op, op.name.empty());
          }
        }
        w.round();
        REQUIRE(w.rounds < 10000);
      }
    }
    for (int r = 0; r < n; ++r) {
      CHECK(w.failed[r].empty());
      REQUIRE(w.ran[r].size() == 4 * 35);
      // Named ones in the same order everywhere (unnamed ones are named by
      // each rank's own call order).
      std::vector<std::string> mine, first;
      for (auto& s : w.ran[r])
        if (s.find("noname") == std::string::npos)
          mine.push_back(s);
      for (auto& s : w.ran[0])
        if (s.find("noname") == std::string::npos)
          first.push_back(s);
      CHECK(mine == first);
    }
  }
}

} // TEST_SUITE
