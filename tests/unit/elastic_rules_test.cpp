// elastic::job_rules: when an elastic job publishes a new world, waits, or
// fails (Horovod's ElasticDriver rules: minimum slots with a timeout, the
// reset limit, no new world before the current one formed, the job's state
// lost with its last holder, every host blacklisted).

#include <doctest/doctest.h>

#include <chrono>
#include <random>

#include "actors/elastic/elastic_rules.hpp"

using namespace hvactor::elastic;
using action = decision::action;
using namespace std::chrono_literals;

namespace {

using tp = job_rules::time_point;

rules_config config(int min, int max, std::optional<int> limit = {}) {
  rules_config c;
  c.min_workers = min;
  c.max_workers = max;
  c.reset_limit = limit;
  c.wait = 10s;
  c.timeout_seconds = 10;
  c.discovery = "discovery function";
  return c;
}

// The world after `d` was published: its seats, formed or not.
world_state after(const decision& d, bool formed) {
  world_state s;
  int64_t next = 100;
  for (auto& seat : d.plan->seats) {
    auto id = seat.id < 0 ? next++ : seat.id;
    s.seats.push_back(id);
    s.members.push_back({id, seat.host, formed});
  }
  s.formed = formed;
  s.held_state = formed;
  return s;
}

} // namespace

TEST_SUITE("elastic rules") {

TEST_CASE("start: waits below min_workers, answers at min_workers, times out after the wait") {
  tp t0{};
  job_rules r{config(2, 4), t0};
  CHECK(r.on_start({{"a", 1}}, t0 + 1s).what == action::wait);
  CHECK(r.on_start({{"a", 1}, {"b", 1}}, t0 + 2s).what == action::publish);
  job_rules late{config(3, 4), t0};
  auto d = late.on_start({{"a", 2}}, t0 + 11s);
  CHECK(d.what == action::fail);
  CHECK(d.kind == hvactor::error_kind::elastic_timeout);
  CHECK(d.message == "Timed out waiting for minimum number of slots to become available: wanted "
                     "3, saw 2 on nodes [a:2] after 10 s (discovery function)");
}

TEST_CASE("the first world is no reset; the same seats are kept; a change waits for the world "
          "to form, then counts a reset") {
  tp t{};
  job_rules r{config(2, 4), t};
  world_state s;
  s.available = {{"a", 2}};
  auto first = r.next_world(s, false, t);
  REQUIRE(first.what == action::publish);
  CHECK(first.plan->seats.size() == 2);
  CHECK(r.resets() == 0);
  auto unformed = after(first, false);
  unformed.available = {{"a", 2}};
  CHECK(r.next_world(unformed, false, t).what == action::keep);
  unformed.available = {{"a", 2}, {"b", 2}};
  CHECK(r.next_world(unformed, false, t).what == action::wait);
  auto formed = after(first, true);
  formed.available = {{"a", 2}, {"b", 2}};
  auto grown = r.next_world(formed, false, t);
  REQUIRE(grown.what == action::publish);
  CHECK(grown.plan->seats.size() == 4);
  CHECK_FALSE(grown.failure);
  CHECK(r.resets() == 1);
}

TEST_CASE("a failure publishes even the same seats, and counts against the reset limit") {
  tp t{};
  job_rules r{config(1, 2, 1), t};
  world_state s;
  s.available = {{"a", 2}};
  auto first = r.next_world(s, false, t);
  auto w = after(first, true);
  w.available = {{"a", 2}};
  auto again = r.next_world(w, true, t);
  CHECK(again.what == action::publish);
  CHECK(again.failure);
  CHECK(r.resets() == 1);
  auto over = r.next_world(w, true, t);
  CHECK(over.what == action::fail);
  CHECK(over.kind == hvactor::error_kind::reset_limit_exceeded);
  CHECK(over.message.find("exceeded its limit: 1") != std::string::npos);
}

TEST_CASE("too few slots: wait and remember the failure; fail when hopeless or after the wait") {
  tp t{};
  job_rules r{config(2, 2), t};
  world_state s;
  s.available = {{"a", 2}};
  auto w = after(r.next_world(s, false, t), true);
  w.available = {{"a", 1}};
  w.members.pop_back();
  CHECK(r.next_world(w, true, t + 1s).what == action::wait);
  CHECK(r.broken());
  w.available = {{"a", 1}, {"b", 1}};
  auto healed = r.next_world(w, false, t + 2s);
  CHECK(healed.what == action::publish);
  CHECK(healed.failure); // the broken world's failure is not forgotten
  CHECK_FALSE(r.broken());
  w.available = {{"a", 1}};
  w.hopeless = true;
  w.first_failure = "worker 1 died";
  auto h = r.next_world(w, true, t + 3s);
  CHECK(h.what == action::fail);
  CHECK(h.message == "every host of the elastic job is blacklisted after failures. First "
                     "failure: worker 1 died");
  w.hopeless = false;
  CHECK(r.next_world(w, false, t + 4s).what == action::wait);
  auto timeout = r.next_world(w, false, t + 14s);
  CHECK(timeout.what == action::fail);
  CHECK(timeout.kind == hvactor::error_kind::elastic_timeout);
}

TEST_CASE("every worker that held the job's state is gone: fail, its last commit is lost") {
  tp t{};
  job_rules r{config(1, 4), t};
  world_state s;
  s.available = {{"a", 2}};
  s.held_state = true;
  s.members = {{7, "a", false}};
  auto d = r.next_world(s, true, t);
  CHECK(d.what == action::fail);
  CHECK(d.message.find("last commit is lost. First failure: none") != std::string::npos);
}

TEST_CASE("property: over random histories a published world has min..max seats, at most "
          "reset_limit resets are published, and no change is published before the world "
          "formed") {
  std::mt19937 rng(2929);
  for (int round = 0; round < 300; ++round) {
    int min = 1 + static_cast<int>(rng() % 3);
    int max = min + static_cast<int>(rng() % 3);
    std::optional<int> limit;
    if (rng() % 2)
      limit = static_cast<int>(rng() % 4);
    tp t{};
    job_rules r{config(min, max, limit), t};
    world_state w;
    int published_resets = 0;
    bool failed = false;
    for (int step = 0; step < 40 && !failed; ++step) {
      t += std::chrono::milliseconds(rng() % 2000);
      w.available.clear();
      for (int h = 0; h < 3; ++h)
        if (int slots = static_cast<int>(rng() % 3); slots > 0)
          w.available.push_back({std::string(1, static_cast<char>('a' + h)), slots});
      bool failure = rng() % 5 == 0;
      bool was_formed = w.formed;
      bool first = w.seats.empty();
      auto d = r.next_world(w, failure, t);
      if (d.what == action::fail) {
        failed = true;
        break;
      }
      if (d.what != action::publish) {
        w.formed = w.formed || rng() % 2 == 0;
        for (auto& m : w.members)
          m.has_state = m.has_state || w.formed;
        continue;
      }
      int seats = static_cast<int>(d.plan->seats.size());
      CHECK(seats >= min);
      CHECK(seats <= max);
      if (!first) {
        ++published_resets;
        CHECK((d.failure || was_formed));
      }
      if (limit)
        CHECK(published_resets <= *limit);
      CHECK(r.resets() == published_resets);
      w = after(d, false);
    }
  }
}

} // TEST_SUITE
