#include "actors/elastic/elastic_policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace hvactor::elastic {

// -- host_blacklist ----------------------------------------------------------------

host_blacklist::host_blacklist(std::optional<std::pair<int, int>> cooldown_range, uint64_t seed)
  : range_(cooldown_range), rng_(seed) {
}

void host_blacklist::failed(const std::string& host, clock::time_point now) {
  auto& e = hosts_[host];
  if (range_) {
    double u = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    auto seconds = cooldown_seconds(*range_, e.failures, u);
    e.until = now
              + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  }
  ++e.failures;
}

bool host_blacklist::blacklisted(const std::string& host, clock::time_point now) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end())
    return false;
  return !range_ || now < it->second.until;
}

std::optional<clock::time_point> host_blacklist::until(const std::string& host) const {
  // Without a `now` the cooldown's end is the answer even once it passed
  // (a time in the past: usable since then).
  auto it = hosts_.find(host);
  if (it == hosts_.end() || !range_)
    return std::nullopt;
  return it->second.until;
}

bool host_blacklist::forever(const std::string& host) const {
  return !range_ && hosts_.count(host) > 0;
}

int host_blacklist::failures(const std::string& host) const {
  auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second.failures;
}

double host_blacklist::cooldown_seconds(std::pair<int, int> range, int n, double u) {
  // Horovod's HostState._set_resurrection_time; ldexp saturates to inf for
  // a large n instead of overflowing a shift.
  auto [lower, upper] = range;
  double seconds = std::ldexp(static_cast<double>(lower), std::max(n, 0)) + u * lower;
  return std::clamp(seconds, static_cast<double>(lower), static_cast<double>(upper));
}

// -- host_order --------------------------------------------------------------------

std::vector<host_slots> host_order::order(const std::vector<host_slots>& found) {
  // discovery.py order_available_hosts: hosts still there keep their
  // relative order; a host that left and came back counts as new.
  std::vector<host_slots> result;
  auto listed = [&](const std::string& host) {
    return std::any_of(result.begin(), result.end(),
                       [&](const host_slots& h) { return h.host == host; });
  };
  for (const auto& host : seen_) {
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const host_slots& h) { return h.host == host; });
    if (it != found.end())
      result.push_back(*it);
  }
  for (const auto& h : found)
    if (!listed(h.host))
      result.push_back(h);
  seen_.clear();
  for (const auto& h : result)
    seen_.push_back(h.host);
  return result;
}

// -- plan_world --------------------------------------------------------------------

namespace {

/// One host of the new world: its capacity and who sits there, in seat order.
struct host_seats {
  std::string host;
  int capacity = 0;
  std::vector<int64_t> members;
  int new_workers = 0;

  int used() const {
    return static_cast<int>(members.size()) + new_workers;
  }
};

} // namespace

namespace {

// Rank 0: the oldest member with state on an available host; else, when
// every member with state is on a host that is gone, the oldest of them
// (handover); else the oldest member on an available host.
const member* choose_rank0(const std::vector<member>& by_age,
                           const std::map<std::string, int>& slots, bool& handover) {
  auto on_available = [&](const member& m) { return slots.count(m.host) > 0; };
  handover = false;
  for (const auto& m : by_age)
    if (m.has_state && on_available(m))
      return &m;
  for (const auto& m : by_age)
    if (m.has_state) {
      handover = true;
      return &m;
    }
  for (const auto& m : by_age)
    if (on_available(m))
      return &m;
  return nullptr;
}

// Hosts in seat order: rank 0's host first, then the rest as given. A
// handover host holds rank 0 alone.
std::vector<host_seats> seat_hosts(const std::vector<host_slots>& available,
                                   const std::map<std::string, int>& slots, const member* first,
                                   bool handover) {
  std::vector<host_seats> hosts;
  if (first)
    hosts.push_back({first->host, handover ? 1 : slots.at(first->host), {}, 0});
  for (const auto& h : available)
    if (h.slots > 0 && std::none_of(hosts.begin(), hosts.end(), [&](const host_seats& s) {
          return s.host == h.host;
        }))
      hosts.push_back({h.host, h.slots, {}, 0});
  return hosts;
}

// Contiguous ranks per host; layouts as for a static job.
void lay_out(world_plan& plan, const std::vector<host_seats>& hosts) {
  rank_planner planner;
  for (const auto& h : hosts) {
    for (int64_t id : h.members)
      plan.seats.push_back({id, h.host, {}});
    for (int i = 0; i < h.new_workers; ++i)
      plan.seats.push_back({-1, h.host, {}});
  }
  for (std::size_t r = 0; r < plan.seats.size(); ++r)
    planner.add(static_cast<int>(r), plan.seats[r].host);
  auto layouts = planner.plan();
  for (std::size_t r = 0; r < plan.seats.size(); ++r)
    plan.seats[r].layout = layouts[r];
}

} // namespace

std::optional<world_plan> plan_world(const std::vector<host_slots>& available,
                                     const std::vector<member>& members, int min_workers,
                                     int max_workers) {
  std::vector<member> by_age = members;
  std::sort(by_age.begin(), by_age.end(),
            [](const member& a, const member& b) { return a.id < b.id; });
  std::map<std::string, int> slots;
  for (const auto& h : available)
    if (h.slots > 0)
      slots.emplace(h.host, h.slots); // the first entry wins
  bool handover = false;
  const member* first = choose_rank0(by_age, slots, handover);
  auto hosts = seat_hosts(available, slots, first, handover);
  auto find_host = [&](const std::string& host) -> host_seats* {
    for (auto& h : hosts)
      if (h.host == host)
        return &h;
    return nullptr;
  };
  const int budget = std::max(max_workers, 0);
  int seated = 0;
  world_plan plan;
  plan.handover = handover;
  // Members before new workers; rank 0's member first, then oldest first.
  std::vector<const member*> order;
  if (first)
    order.push_back(first);
  for (const auto& m : by_age)
    if (&m != first)
      order.push_back(&m);
  for (const member* m : order) {
    host_seats* h = find_host(m->host);
    if (h && h->used() < h->capacity && seated < budget) {
      h->members.push_back(m->id);
      ++seated;
    } else {
      plan.leaving.push_back(m->id);
    }
  }
  for (auto& h : hosts)
    while (h.used() < h.capacity && seated < budget) {
      ++h.new_workers;
      ++seated;
    }
  if (seated < min_workers)
    return std::nullopt;
  lay_out(plan, hosts);
  std::sort(plan.leaving.begin(), plan.leaving.end());
  return plan;
}

int total_slots(const std::vector<host_slots>& hosts) {
  int total = 0;
  for (const auto& h : hosts)
    total += std::max(h.slots, 0);
  return total;
}

} // namespace hvactor::elastic
