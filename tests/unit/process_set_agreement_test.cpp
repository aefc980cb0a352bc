// Adding and removing a process set decided alike on every rank, as plain
// code: every rank's part goes through the allgather's words and back; the
// same list everywhere adds the set; lists that differ, a list that is no
// set of the job's ranks, or ranks some rank already has as a set refuse it
// with one message naming what each rank passed; removals of different
// sets are refused the same way.

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <hvactor/errors.hpp>

#include "collectives/engine/process_set_agreement.hpp"

namespace co = hvactor::collectives;

namespace {

/// Every rank's proposal through the words one allgather concatenates.
std::vector<co::set_proposal> exchanged(const std::vector<co::set_proposal>& parts) {
  std::vector<int64_t> words;
  for (auto& p : parts) {
    auto mine = co::encode(p);
    words.insert(words.end(), mine.begin(), mine.end());
  }
  return co::decode_proposals(words, static_cast<int>(parts.size()));
}

} // namespace

TEST_SUITE("process set agreement") {

TEST_CASE("proposals of different lengths travel through one allgather's words; words that are "
          "not proposals name the rank") {
  auto all = exchanged({{7, 0, {0, 1}}, {8, 2, {0, 1, 2}}, {9, 0, {}}});
  REQUIRE(all.size() == 3);
  CHECK(all[0].node == 7);
  CHECK(all[1].held == 2);
  CHECK(all[1].ranks == std::vector<int>{0, 1, 2});
  CHECK(all[2].ranks.empty());
  std::vector<int64_t> short_words{7, 0, 2, 0, 1, 8, 0, 5, 0};
  try {
    co::decode_proposals(short_words, 2);
    FAIL("no error");
  } catch (const hvactor::collective_error& e) {
    CHECK(std::string{e.what()}.find("rank 1 sent no process set proposal") != std::string::npos);
  }
  CHECK_THROWS_AS(co::decode_proposals(std::vector<int64_t>{1, 0, -1}, 1),
                  hvactor::collective_error);
}

TEST_CASE("the same new list everywhere adds the set") {
  CHECK(co::add_refusal(exchanged({{1, 0, {0, 2}}, {1, 0, {0, 2}}, {2, 0, {0, 2}}}), 3,
                        "add_process_set")
        == "");
}

TEST_CASE("lists that differ between ranks refuse the set on every rank, naming what each "
          "passed and which already had it") {
  auto why = co::add_refusal(exchanged({{1, 1, {0, 1}}, {1, 0, {0, 1, 2}}, {1, 0, {0, 1, 2}}}), 3,
                             "add_process_set");
  CHECK(why == "hvd::add_process_set: every rank must pass the same ranks: rank 0 passed 0, 1 "
               "(process set 1 there), ranks 1, 2 passed 0, 1, 2");
  why = co::add_refusal(exchanged({{1, 0, {1}}, {1, 0, {}}}), 2, "init");
  CHECK(why == "hvd::init: every rank must pass the same ranks: rank 0 passed 1, rank 1 passed "
               "no ranks");
}

TEST_CASE("a list that is no set of the job's ranks is refused with what is wrong") {
  auto refusal = [](std::vector<int> ranks) {
    return co::add_refusal(exchanged({{1, 0, ranks}, {1, 0, ranks}}), 2, "add_process_set");
  };
  CHECK(refusal({}) == "hvd::add_process_set: a process set needs at least one rank");
  CHECK(refusal({0, 2}) == "hvd::add_process_set: ranks 0, 2 are not all ranks of the job (size 2)");
  CHECK(refusal({-1, 0}) == "hvd::add_process_set: ranks -1, 0 are not all ranks of the job (size 2)");
  CHECK(refusal({1, 1}) == "hvd::add_process_set: ranks 1, 1 name a rank twice");
}

TEST_CASE("ranks that are a set already: Horovod's refusal, or where only some ranks have it, "
          "which do") {
  CHECK(co::add_refusal(exchanged({{1, 3, {0, 1}}, {1, 3, {0, 1}}}), 2, "add_process_set")
        == "hvd::add_process_set: Attempted to add a duplicate process set: process set 3 (ranks "
           "0, 1)");
  auto why = co::add_refusal(exchanged({{1, 3, {0, 1}}, {1, 0, {0, 1}}, {1, 0, {0, 1}}}), 3,
                             "add_process_set");
  CHECK(why.find("ranks 0, 1 are a process set on rank 0 only (rank 0 passed process set 3, "
                 "ranks 1, 2 passed none)")
        != std::string::npos);
}

TEST_CASE("removals: the same set everywhere is removed; different sets are refused naming each; "
          "the global set or a set never added is no removal") {
  std::map<int, std::vector<int>> sets{{1, {0, 1}}, {2, {0, 1, 2}}};
  auto d = co::decide_removal({{2, true}, {2, true}, {2, true}}, sets);
  CHECK(d.refusal.empty());
  CHECK(d.remove);
  CHECK(d.removed);
  d = co::decide_removal({{1, true}, {2, true}, {2, true}}, sets);
  CHECK(d.refusal == "hvd::remove_process_set: every rank must remove the same process set: rank "
                     "0 passed process set 1 (ranks 0, 1), ranks 1, 2 passed process set 2 "
                     "(ranks 0, 1, 2)");
  CHECK(!d.remove);
  d = co::decide_removal({{0, false}, {-1, false}}, sets);
  CHECK(d.refusal == "hvd::remove_process_set: every rank must remove the same process set: rank "
                     "0 passed the global process set, rank 1 passed a process set never added, "
                     "or removed");
  d = co::decide_removal({{0, false}, {0, false}}, sets);
  CHECK(d.refusal.empty());
  CHECK(!d.remove);
  CHECK(!d.removed);
  d = co::decide_removal({{2, true}, {2, false}}, sets);
  CHECK(d.remove);
  CHECK(!d.removed);
}

} // TEST_SUITE
