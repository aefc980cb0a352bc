// elastic::worker_registry: what an elastic job's workers hold on their
// nodes, and that whatever ends a worker gives all of it back (issue 29: a
// worker that left never had its colocator stopped, its CPUs stayed
// reserved, and its host, listed again, was blacklisted for good).

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include "actors/elastic/elastic_workers.hpp"

using namespace hvactor::elastic;

TEST_SUITE("elastic worker registry") {

TEST_CASE("a worker's life: asked, reserved, colocated, registered, left, gone: its colocator "
          "stops, then it holds nothing") {
  worker_registry r;
  auto id = r.add("host-1");
  CHECK(r.find(id)->held == holding::asked);
  CHECK(r.reserved(id) == give_back::none);
  CHECK(r.find(id)->held == holding::reservation);
  CHECK(r.colocated(id) == give_back::none);
  r.registered(id);
  CHECK(r.find(id)->phase == worker_phase::running);
  CHECK(r.live() == std::vector<int64_t>{id});
  r.leave(id);
  CHECK(r.live().empty());
  CHECK(r.gone(id) == give_back::stop_colocator);
  CHECK(r.find(id)->held == holding::stopping);
  CHECK(r.leaked().empty());
  CHECK(r.gone(id) == give_back::none); // once
  r.colocator_stopped(id);
  CHECK(r.find(id)->held == holding::nothing);
}

TEST_CASE("gone before its reservation arrives: the reservation is released when it does") {
  worker_registry r;
  auto id = r.add("host-1");
  CHECK(r.gone(id) == give_back::none);
  CHECK(r.reserved(id) == give_back::release_reservation);
  CHECK(r.find(id)->held == holding::nothing);
}

TEST_CASE("gone between reservation and colocator: the reservation is released, and a "
          "colocator that starts anyway is stopped") {
  worker_registry r;
  auto id = r.add("host-2");
  r.reserved(id);
  CHECK(r.gone(id) == give_back::release_reservation);
  CHECK(r.colocated(id) == give_back::stop_colocator);
  CHECK(r.find(id)->held == holding::stopping);
}

TEST_CASE("a refused reservation holds nothing; ids grow with start order; unknown ids are "
          "gone") {
  worker_registry r;
  auto a = r.add("h");
  auto b = r.add("h");
  CHECK(b > a);
  r.reserve_failed(a);
  CHECK(r.find(a)->held == holding::nothing);
  CHECK(r.gone(a) == give_back::none);
  CHECK(r.is_gone(a));
  CHECK_FALSE(r.is_gone(b));
  CHECK(r.is_gone(999));
  CHECK_THROWS_AS(r.registered(999), std::logic_error);
}

// A node's ledger and colocators as the coordinator's messages leave them;
// the registry's answers carried out as the elastic coordinator does.
TEST_CASE("property: after any sequence of events (1,000 random ones), nothing stays "
          "reserved on a node for a worker that no longer exists") {
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng{seed};
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    worker_registry r;
    struct node_side {
      bool reserved = false;    // the node's ledger holds the worker's reservation
      bool colocator = false;   // its colocator runs
      bool reply_due = false;   // the reservation's answer is on its way
      bool colocating = false;  // a colocate request is on its way
      bool stop_due = false;    // a stop request is on its way to the colocator
    };
    std::map<int64_t, node_side> node;
    auto apply = [&](int64_t id, give_back g) {
      auto& n = node[id];
      if (g == give_back::release_reservation)
        n.reserved = false;
      else if (g == give_back::stop_colocator)
        n.stop_due = true;
    };
    for (int step = 0; step < 60; ++step) {
      std::vector<int64_t> ids;
      for (auto& [id, w] : r.all())
        ids.push_back(id);
      switch (ids.empty() ? 0 : pick(9)) {
        case 0: { // a new seat
          auto id = r.add("host-" + std::to_string(pick(3)));
          node[id].reply_due = true;
          break;
        }
        case 1: { // a reservation's answer arrives
          auto id = ids[pick(ids.size())];
          auto& n = node[id];
          if (!n.reply_due)
            break;
          n.reply_due = false;
          if (pick(4) == 0) {
            r.reserve_failed(id);
            apply(id, r.gone(id)); // could not reserve: the worker failed
            break;
          }
          n.reserved = true;
          auto g = r.reserved(id);
          apply(id, g);
          if (g == give_back::none)
            n.colocating = true; // colocate(), maybe after shipping the binary
          break;
        }
        case 2: { // a colocate answer arrives
          auto id = ids[pick(ids.size())];
          auto& n = node[id];
          if (!n.colocating)
            break;
          n.colocating = false;
          if (pick(5) == 0) { // could not start: the worker failed
            apply(id, r.gone(id));
            break;
          }
          n.colocator = true; // owns the reservation (kept in the ledger)
          apply(id, r.colocated(id));
          break;
        }
        case 3: { // a stop reaches a colocator: it reaps, releases, answers
          auto id = ids[pick(ids.size())];
          auto& n = node[id];
          if (!n.stop_due)
            break;
          n.stop_due = false;
          n.colocator = false;
          n.reserved = false;
          r.colocator_stopped(id);
          break;
        }
        case 4:
          r.registered(ids[pick(ids.size())]);
          break;
        case 5:
          r.leave(ids[pick(ids.size())]);
          break;
        default: { // exited, failed, lost, stopped after its grace, job ends
          auto id = ids[pick(ids.size())];
          apply(id, r.gone(id));
          break;
        }
      }
      REQUIRE(r.leaked().empty());
    }
    // The job ends: every worker goes, every message in flight arrives.
    for (auto& [id, w] : r.all())
      apply(id, r.gone(id));
    for (int round = 0; round < 3; ++round)
      for (auto& [id, n] : node) {
        if (n.reply_due) {
          n.reply_due = false;
          n.reserved = true;
          apply(id, r.reserved(id));
        }
        if (n.colocating) {
          n.colocating = false;
          n.colocator = true;
          apply(id, r.colocated(id));
        }
        if (n.stop_due) {
          n.stop_due = false;
          n.colocator = false;
          n.reserved = false;
          r.colocator_stopped(id);
        }
      }
    for (auto& [id, n] : node) {
      CAPTURE(id);
      CHECK_FALSE(n.reserved);
      CHECK_FALSE(n.colocator);
      CHECK(r.find(id)->held == holding::nothing);
    }
  }
}

} // TEST_SUITE
