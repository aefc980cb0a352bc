#include "actors/elastic/elastic_policy.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

using namespace hvactor::elastic;
using hvactor::host_slots;

namespace {

using std::chrono::seconds;

/// Seat ids in rank order.
std::vector<int64_t> ids(const world_plan& plan) {
  std::vector<int64_t> out;
  for (const auto& s : plan.seats)
    out.push_back(s.id);
  return out;
}

/// Seat hosts in rank order.
std::vector<std::string> hosts_of(const world_plan& plan) {
  std::vector<std::string> out;
  for (const auto& s : plan.seats)
    out.push_back(s.host);
  return out;
}

constexpr int no_limit = 1 << 30;

} // namespace

TEST_SUITE("elastic_policy") {

TEST_CASE("the cooldown doubles per failure, adds up to one lower bound and stays in range") {
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 0, 0.0) == doctest::Approx(10));
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 0, 0.5) == doctest::Approx(15));
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 1, 0.0) == doctest::Approx(20));
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 2, 0.25) == doctest::Approx(42.5));
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 4, 0.0) == doctest::Approx(100));
  CHECK(host_blacklist::cooldown_seconds({10, 100}, 5000, 0.9) == doctest::Approx(100));
  CHECK(host_blacklist::cooldown_seconds({5, 5}, 0, 0.99) == doctest::Approx(5));
}

TEST_CASE("a failed host without a cooldown range is blacklisted for good") {
  host_blacklist bl;
  auto t0 = clock::time_point{} + seconds(1000);
  CHECK_FALSE(bl.blacklisted("a", t0));
  CHECK(bl.failures("a") == 0);
  bl.failed("a", t0);
  CHECK(bl.blacklisted("a", t0));
  CHECK(bl.blacklisted("a", t0 + std::chrono::hours(24 * 365)));
  CHECK(bl.forever("a"));
  CHECK_FALSE(bl.until("a"));
  CHECK(bl.failures("a") == 1);
  CHECK_FALSE(bl.blacklisted("b", t0));
  CHECK_FALSE(bl.forever("b"));
}

TEST_CASE("a failed host with a cooldown range comes back once its cooldown expired") {
  host_blacklist bl{std::pair{10, 1000}, 42};
  auto t0 = clock::time_point{} + seconds(1000);
  CHECK_FALSE(bl.until("a"));
  bl.failed("a", t0);
  CHECK_FALSE(bl.forever("a"));
  REQUIRE(bl.until("a"));
  auto first = *bl.until("a") - t0;
  CHECK(first >= seconds(10));
  CHECK(first < seconds(20));
  CHECK(bl.blacklisted("a", t0 + seconds(9)));
  CHECK_FALSE(bl.blacklisted("a", t0 + seconds(20)));
  // The second failure blacklists it for lower * 2 + U * lower.
  auto t1 = t0 + seconds(100);
  bl.failed("a", t1);
  CHECK(bl.failures("a") == 2);
  auto second = *bl.until("a") - t1;
  CHECK(second >= seconds(20));
  CHECK(second < seconds(30));
  CHECK(bl.blacklisted("a", t1 + seconds(19)));
  CHECK_FALSE(bl.blacklisted("a", t1 + seconds(30)));
}

TEST_CASE("host_order keeps the old order and appends new hosts in discovery order") {
  host_order order;
  CHECK(order.order({{"b", 1}, {"a", 2}}) == std::vector<host_slots>{{"b", 1}, {"a", 2}});
  // Discovery lists them differently now, with a new host in front and a
  // changed slot count: old hosts keep their places, with the new slots.
  CHECK(order.order({{"c", 1}, {"a", 3}, {"b", 1}})
        == std::vector<host_slots>{{"b", 1}, {"a", 3}, {"c", 1}});
  // A host that left and came back is new again (Horovod's order).
  CHECK(order.order({{"a", 3}, {"c", 1}}) == std::vector<host_slots>{{"a", 3}, {"c", 1}});
  CHECK(order.order({{"b", 1}, {"c", 1}, {"a", 3}})
        == std::vector<host_slots>{{"a", 3}, {"c", 1}, {"b", 1}});
}

TEST_CASE("a first world fills every slot with new workers, contiguous per host") {
  auto plan = plan_world({{"a", 2}, {"b", 1}}, {}, 1, no_limit);
  REQUIRE(plan);
  CHECK(ids(*plan) == std::vector<int64_t>{-1, -1, -1});
  CHECK(hosts_of(*plan) == std::vector<std::string>{"a", "a", "b"});
  CHECK(plan->leaving.empty());
  CHECK_FALSE(plan->handover);
  for (size_t r = 0; r < plan->seats.size(); ++r) {
    CHECK(plan->seats[r].layout.rank == static_cast<int>(r));
    CHECK(plan->seats[r].layout.size == 3);
  }
}

TEST_CASE("survivors keep their seats and rank 0 is the oldest member with state") {
  // Worker 3 (state) on b is older than worker 5 (state) on a; worker 1
  // never joined a formed generation.
  std::vector<member> members{{5, "a", true}, {3, "b", true}, {1, "a", false}, {7, "b", true}};
  auto plan = plan_world({{"a", 2}, {"b", 3}}, members, 1, no_limit);
  REQUIRE(plan);
  // b comes first (rank 0's host): 3, then 7, then a new worker; then a.
  CHECK(ids(*plan) == std::vector<int64_t>{3, 7, -1, 1, 5});
  CHECK(hosts_of(*plan) == std::vector<std::string>{"b", "b", "b", "a", "a"});
  CHECK(plan->leaving.empty());
  CHECK_FALSE(plan->handover);
}

TEST_CASE("without members with state the oldest member is rank 0") {
  auto plan = plan_world({{"a", 1}, {"b", 1}}, {{9, "a", false}, {4, "b", false}}, 2, no_limit);
  REQUIRE(plan);
  CHECK(ids(*plan) == std::vector<int64_t>{4, 9});
}

TEST_CASE("members on hosts that are gone leave") {
  auto plan = plan_world({{"a", 2}}, {{1, "a", true}, {2, "gone", true}}, 1, no_limit);
  REQUIRE(plan);
  CHECK(ids(*plan) == std::vector<int64_t>{1, -1});
  CHECK(plan->leaving == std::vector<int64_t>{2});
  CHECK_FALSE(plan->handover);
}

TEST_CASE("fewer slots on a host evict its newest members, never rank 0") {
  std::vector<member> members{{1, "a", false}, {2, "a", true}, {3, "a", true}, {4, "b", true}};
  auto plan = plan_world({{"a", 2}, {"b", 1}}, members, 1, no_limit);
  REQUIRE(plan);
  // Rank 0 is worker 2 (oldest with state); a keeps 2 and the oldest other, 1.
  CHECK(ids(*plan) == std::vector<int64_t>{2, 1, 4});
  CHECK(plan->leaving == std::vector<int64_t>{3});
}

TEST_CASE("max_workers keeps members before new workers") {
  std::vector<member> members{{1, "b", true}, {2, "b", true}, {3, "a", true}};
  auto plan = plan_world({{"a", 3}, {"b", 3}}, members, 1, 2);
  REQUIRE(plan);
  CHECK(ids(*plan) == std::vector<int64_t>{1, 2});
  CHECK(plan->leaving == std::vector<int64_t>{3});
  auto grown = plan_world({{"a", 3}, {"b", 3}}, members, 1, 4);
  REQUIRE(grown);
  CHECK(ids(*grown) == std::vector<int64_t>{1, 2, -1, 3});
  CHECK(hosts_of(*grown) == std::vector<std::string>{"b", "b", "b", "a"});
  CHECK(grown->leaving.empty());
}

TEST_CASE("fewer seats than min_workers plan no world") {
  CHECK_FALSE(plan_world({{"a", 2}}, {}, 3, no_limit));
  CHECK_FALSE(plan_world({}, {{1, "gone", false}}, 1, no_limit));
  CHECK(plan_world({{"a", 2}, {"b", 1}}, {}, 3, no_limit));
  // max_workers below what min_workers needs, and hosts with 0 slots.
  CHECK_FALSE(plan_world({{"a", 4}}, {}, 3, 2));
  CHECK_FALSE(plan_world({{"a", 0}}, {}, 1, no_limit));
}

TEST_CASE("when every member with state is on a host that is gone, the oldest hands over") {
  std::vector<member> members{{2, "old", true}, {4, "old", true}, {5, "a", false}};
  auto plan = plan_world({{"a", 2}}, members, 1, no_limit);
  REQUIRE(plan);
  CHECK(plan->handover);
  CHECK(ids(*plan) == std::vector<int64_t>{2, 5, -1});
  CHECK(hosts_of(*plan) == std::vector<std::string>{"old", "a", "a"});
  CHECK(plan->leaving == std::vector<int64_t>{4});
  // One member with state on an available host is enough: no handover.
  members.push_back({6, "a", true});
  auto no_handover = plan_world({{"a", 2}}, members, 1, no_limit);
  REQUIRE(no_handover);
  CHECK_FALSE(no_handover->handover);
  CHECK(ids(*no_handover) == std::vector<int64_t>{6, 5});
  CHECK(no_handover->leaving == std::vector<int64_t>{2, 4});
}

TEST_CASE("local and cross ranks follow rank_planner") {
  auto plan = plan_world({{"a", 3}, {"b", 1}, {"c", 2}}, {{1, "b", true}}, 1, no_limit);
  REQUIRE(plan);
  CHECK(hosts_of(*plan) == std::vector<std::string>{"b", "a", "a", "a", "c", "c"});
  hvactor::rank_planner planner;
  for (size_t r = 0; r < plan->seats.size(); ++r)
    planner.add(static_cast<int>(r), plan->seats[r].host);
  auto expected = planner.plan();
  for (size_t r = 0; r < plan->seats.size(); ++r) {
    const auto& got = plan->seats[r].layout;
    CAPTURE(r);
    CHECK(got.rank == expected[r].rank);
    CHECK(got.local_rank == expected[r].local_rank);
    CHECK(got.local_size == expected[r].local_size);
    CHECK(got.cross_rank == expected[r].cross_rank);
    CHECK(got.cross_size == expected[r].cross_size);
  }
  // Spelled out: a's third worker (rank 3, local 2) is alone at its index.
  CHECK(plan->seats[3].layout.local_rank == 2);
  CHECK(plan->seats[3].layout.cross_size == 1);
  CHECK(plan->seats[4].layout.cross_rank == 2); // c's first: after b and a
  CHECK(plan->seats[4].layout.cross_size == 3);
  CHECK(plan->seats[0].layout.local_size == 1);
}

TEST_CASE("total_slots adds every host's slots") {
  CHECK(total_slots({}) == 0);
  CHECK(total_slots({{"a", 2}, {"b", 3}}) == 5);
}

} // TEST_SUITE
