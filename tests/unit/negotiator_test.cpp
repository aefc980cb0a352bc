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

#include "collectives/engine/negotiator.hpp"

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
  // What each rank ran, as every rank can name it: named ones by name,
  // unnamed ones by size ("lane:<count>"); zeros a joined rank took part
  // with are marked "0:".
  std::vector<std::vector<std::string>> seq;
  std::vector<std::map<uint64_t, co::operation>> ops;
  // Per rank: the round its join ended in (-1: none yet) and its result.
  std::vector<int> join_round;
  std::vector<int> last_joined;
  std::vector<uint64_t> next_id;
  int rounds = 0;
  size_t header_words = 0;

  world(int n, size_t capacity)
    : names(n), ran(n), failed(n), seq(n), ops(n), join_round(n, -1), last_joined(n, -1),
      next_id(n, 1) {
    for (int r = 0; r < n; ++r)
      ranks.emplace_back(r, n, "host", capacity);
  }

  void submit(int r, co::operation op, bool lane = false) {
    auto id = next_id[r]++;
    if (lane)
      op.name = co::negotiator::noname(op.kind, id); // per-rank call order
    names[r][id] = op.name;
    auto& kept = ops[r][id] = op; // add() keeps a pointer
    ranks[r].add(id, kept, lane);
  }

  static std::string seq_name(const co::operation& op, bool lane) {
    return lane || op.name.empty() || op.name.find("noname") != std::string::npos
             ? "lane:" + std::to_string(op.count)
             : op.name;
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

  // The allgather of strings: every rank's `get(negotiator)`, by rank.
  template <class Get>
  std::vector<std::string> gather(Get get) {
    std::vector<std::string> all;
    for (auto& neg : ranks)
      all.push_back(get(neg));
    return all;
  }

  /// `querying`: the rank that asks how far every lane got (it waits long
  /// on an unnamed operation).
  void round(int aborting = -1, int querying = -1) {
    ++rounds;
    size_t n = ranks.size();
    std::vector<std::vector<int64_t>> headers;
    for (size_t r = 0; r < n; ++r)
      headers.push_back(ranks[r].propose(static_cast<int>(r) == aborting, false,
                                         static_cast<int>(r) == querying));
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
        auto lists = gather([](co::negotiator& neg) { return neg.lane_list(); });
        for (auto& neg : ranks)
          neg.explain_lane(lists);
      }
    }
    if (plans[0].lane_lists) {
      auto lists = gather([](co::negotiator& neg) { return neg.lane_list(); });
      for (auto& neg : ranks)
        neg.read_lane_lists(lists);
    }
    if (plans[0].names) {
      auto all = gather([](co::negotiator& neg) { return neg.announcements(); });
      for (auto& neg : ranks)
        neg.learn(all);
    }
    for (size_t r = 1; r < n; ++r)
      REQUIRE(plans[r].progress == plans[0].progress);
    if (plans[0].progress) {
      std::vector<int64_t> all;
      for (auto& neg : ranks)
        all.push_back(neg.progress());
      for (auto& neg : ranks)
        neg.read_progress(all);
    }
    for (size_t r = 0; r < n; ++r) {
      auto res = ranks[r].finish(std::make_exception_ptr(hvactor::collective_error("aborted")));
      std::map<uint64_t, co::operation> zeros(res.zeros.begin(), res.zeros.end());
      for (auto id : res.ready) {
        if (auto z = zeros.find(id); z != zeros.end()) {
          REQUIRE(id >= co::negotiator::phantom_base);
          seq[r].push_back("0:" + seq_name(z->second, false));
          continue;
        }
        ran[r].push_back(names[r].at(id));
        seq[r].push_back(seq_name(ops[r].at(id), false));
      }
      if (res.join_done) {
        REQUIRE(join_round[r] == -1);
        join_round[r] = rounds;
        last_joined[r] = res.last_joined;
      }
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

TEST_CASE("an unnamed operation names the ranks that have not submitted it in a round that asked "
          "how far every lane got, and only then; a joined rank is never missing") {
  world w{3, 16};
  for (int r = 0; r < 3; ++r)
    w.submit(r, named("", 4), true);
  w.round();
  REQUIRE(w.idle());
  w.submit(0, named("", 4), true);
  w.submit(1, named("", 4), true);
  w.round();
  auto waiting = w.ranks[0].pending();
  REQUIRE(waiting.size() == 1);
  CHECK(!waiting[0].known);
  w.round(-1, 1); // rank 1 asks; every rank learns
  for (int r : {0, 1}) {
    CAPTURE(r);
    waiting = w.ranks[r].pending();
    REQUIRE(waiting.size() == 1);
    CHECK(waiting[0].known);
    CHECK(waiting[0].missing == std::vector<int>{2});
  }
  w.round();
  CHECK(!w.ranks[0].pending()[0].known);
  // Rank 2 joins: it takes part with zeros, and the unnamed allreduce runs.
  CHECK(w.ranks[2].not_joined().empty());
  w.ranks[2].join();
  w.round(-1, 0);
  CHECK(w.idle());
  CHECK(w.ran[0].size() == 2);
  CHECK(w.ranks[2].not_joined() == std::vector<int>{0, 1});
  CHECK(w.ranks[0].not_joined().empty()); // rank 0 has not joined itself
  w.ranks[0].join();
  w.ranks[1].join();
  w.round();
  CHECK(w.join_round[2] == w.rounds);
  CHECK(w.ranks[2].not_joined().empty());
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

TEST_CASE("a joined rank takes part with zeros in what the others submit, named, cached or "
          "unnamed, and the join ends on every rank in one round with the last rank to join") {
  for (size_t capacity : {size_t{0}, size_t{16}}) {
    CAPTURE(capacity);
    world w{3, capacity};
    // Step 1: everyone submits g1 (so that it is cached when capacity > 0).
    for (int r = 0; r < 3; ++r)
      w.submit(r, named("g1", 4));
    w.round();
    REQUIRE(w.idle());
    // Rank 2 runs out of data and joins; the others go on.
    w.ranks[2].join();
    w.submit(0, named("g1", 4));
    w.submit(0, named("g2", 6));
    w.submit(0, named("", 3), true);
    w.round();
    CHECK(!w.ranks[0].idle()); // rank 1 has not submitted them yet
    w.submit(1, named("", 3), true);
    w.submit(1, named("g2", 6));
    w.submit(1, named("g1", 4));
    for (int i = 0; i < 3 && !w.idle(); ++i)
      w.round();
    CHECK(w.idle());
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(w.failed[r].empty());
      CHECK(w.join_round[r] == -1);
    }
    // The same sequence everywhere, rank 2's part as zeros.
    REQUIRE(w.seq[0].size() == 4);
    CHECK(w.seq[0] == w.seq[1]);
    std::vector<std::string> zeros;
    for (auto& s : w.seq[0])
      zeros.push_back(s == "g1" && zeros.empty() ? s : "0:" + s);
    CHECK(w.seq[2] == zeros);
    // Rank 0 joins, then rank 1: the join ends on every rank in the same
    // round, naming rank 1.
    w.ranks[0].join();
    w.round();
    CHECK(w.join_round == std::vector<int>{-1, -1, -1});
    w.ranks[1].join();
    w.round();
    CHECK(w.join_round[0] == w.rounds);
    CHECK(w.join_round[1] == w.rounds);
    CHECK(w.join_round[2] == w.rounds);
    CHECK(w.last_joined == std::vector<int>{1, 1, 1});
    // Afterwards the ranks pair as before, unnamed ones included.
    for (int r = 0; r < 3; ++r) {
      w.submit(r, named("", 3), true);
      w.submit(r, named("g1", 4));
    }
    w.round();
    CHECK(w.idle());
    CHECK(w.seq[0].back() == w.seq[2].back());
    CHECK(w.seq[2].back().rfind("0:", 0) == std::string::npos);
  }
}

TEST_CASE("while a rank has joined, an allgather or a broadcast fails on the others with "
          "Horovod's message, and the joined rank runs nothing for it") {
  world w{2, 16};
  w.ranks[1].join();
  co::operation bc;
  bc.kind = co::op_kind::broadcast;
  bc.count = 17;
  bc.root = 1;
  w.submit(0, bc, true);
  co::operation ag;
  ag.kind = co::op_kind::allgather;
  ag.count = 5;
  ag.name = "gathered";
  w.submit(0, ag);
  for (int i = 0; i < 3 && !w.idle(); ++i)
    w.round();
  CHECK(w.idle());
  REQUIRE(w.failed[0].size() == 2);
  auto text = w.failed[0][0] + "\n" + w.failed[0][1];
  CAPTURE(text);
  CHECK(text.find("Broadcast is not supported with Join at this time") != std::string::npos);
  CHECK(text.find("Allgather is not supported with Join at this time") != std::string::npos);
  CHECK(text.find("rank 1 called hvd::join()") != std::string::npos);
  CHECK(w.seq[1].empty());
  CHECK(w.failed[1].empty());
  // The join still ends when rank 0 joins.
  w.ranks[0].join();
  w.round();
  CHECK(w.last_joined == std::vector<int>{0, 0});
}

TEST_CASE("while a rank has joined, it takes part with zeros in device allreduces, and an "
          "alltoall or a reducescatter fails on the others with Horovod's message") {
  world w{2, 16};
  w.ranks[1].join();
  auto dev = named("grad.gpu", 6);
  dev.device = true;
  w.submit(0, dev);
  co::operation a2a;
  a2a.kind = co::op_kind::alltoall;
  a2a.count = 4;
  w.submit(0, a2a, true);
  co::operation rs;
  rs.kind = co::op_kind::reducescatter;
  rs.count = 8;
  rs.reduction = hvd::op::sum;
  rs.device = true;
  rs.name = "rs";
  w.submit(0, rs);
  for (int i = 0; i < 4 && !w.idle(); ++i)
    w.round();
  CHECK(w.idle());
  REQUIRE(w.seq[0].size() == 1);
  REQUIRE(w.seq[1].size() == 1);
  CHECK("0:" + w.seq[0][0] == w.seq[1][0]);
  REQUIRE(w.failed[0].size() == 2);
  auto text = w.failed[0][0] + "\n" + w.failed[0][1];
  CAPTURE(text);
  CHECK(text.find("Alltoall is not supported with Join at this time") != std::string::npos);
  CHECK(text.find("Reducescatter is not supported with Join at this time") != std::string::npos);
  CHECK(w.failed[1].empty());
  w.ranks[0].join();
  w.round();
  CHECK(w.last_joined == std::vector<int>{0, 0});
}

TEST_CASE("ranks with uneven numbers of steps that join at random times run the same sequence, "
          "every submitted operation once, and end the join together") {
  for (int seed = 0; seed < 40; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    int n = 2 + seed % 3;
    size_t capacity = std::vector<size_t>{0, 3, 1024}[static_cast<size_t>(seed) % 3];
    CAPTURE(seed);
    CAPTURE(n);
    CAPTURE(capacity);
    world w{n, capacity};
    // Rank r runs 3 + r + seed % 4 steps of 8 named gradients (in its own
    // order) and 1 unnamed allreduce, then joins.
    std::vector<std::vector<co::operation>> plan(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      int steps = 3 + (r * 7 + seed) % 4;
      for (int s = 0; s < steps; ++s) {
        std::vector<co::operation> step;
        for (int i = 0; i < 8; ++i)
          step.push_back(named("grad" + std::to_string(i), 1 + static_cast<size_t>(i)));
        std::shuffle(step.begin(), step.end(), rng);
        step.insert(step.begin() + static_cast<long>(rng() % step.size()), named("", 2));
        plan[r].insert(plan[r].end(), step.begin(), step.end());
      }
    }
    // A rank submits a step only once its previous one ran (as a training
    // loop that synchronizes before the next step).
    std::vector<size_t> at(static_cast<size_t>(n), 0);
    std::vector<bool> joined(static_cast<size_t>(n), false);
    while (std::find(w.join_round.begin(), w.join_round.end(), -1) != w.join_round.end()) {
      for (int r = 0; r < n; ++r) {
        auto& neg = w.ranks[r];
        if (!neg.idle() || joined[r] || rng() % 3 == 0)
          continue;
        if (at[r] == plan[r].size()) {
          neg.join();
          joined[r] = true;
          continue;
        }
        for (int k = 0; k < 9; ++k, ++at[r]) {
          auto& op = plan[r][at[r]];
          w.submit(r, op, op.name.empty());
        }
      }
      w.round();
      REQUIRE(w.rounds < 5000);
    }
    int longest = 0;
    for (int r = 0; r < n; ++r)
      longest = std::max<int>(longest, static_cast<int>(plan[r].size()));
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(w.failed[r].empty());
      CHECK(w.idle());
      CHECK(w.ran[r].size() == plan[r].size());
      // Every rank's sequence is the same once zeros are read as the
      // operation they stand for.
      std::vector<std::string> mine, first;
      for (auto& s : w.seq[r])
        mine.push_back(s.rfind("0:", 0) == 0 ? s.substr(2) : s);
      for (auto& s : w.seq[0])
        first.push_back(s.rfind("0:", 0) == 0 ? s.substr(2) : s);
      CHECK(mine == first);
      CHECK(mine.size() == static_cast<size_t>(longest));
      CHECK(w.join_round[r] == w.join_round[0]);
      CHECK(w.last_joined[r] == w.last_joined[0]);
    }
  }
}

} // TEST_SUITE
