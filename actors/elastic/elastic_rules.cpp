#include "actors/elastic/elastic_rules.hpp"

#include <fmt/format.h>

namespace hvactor::elastic {

namespace {

std::string describe_hosts(const std::vector<host_slots>& hosts) {
  std::vector<std::string> parts;
  for (auto& h : hosts)
    parts.push_back(fmt::format("{}:{}", h.host, h.slots));
  return parts.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(parts, ", "));
}

decision failed(error_kind kind, std::string message) {
  return decision{decision::action::fail, std::nullopt, false, kind, std::move(message)};
}

bool same_world(const world_plan& plan, const std::vector<int64_t>& seats) {
  if (plan.seats.size() != seats.size())
    return false;
  for (size_t r = 0; r < seats.size(); ++r)
    if (plan.seats[r].id != seats[r])
      return false;
  return true;
}

} // namespace

job_rules::job_rules(rules_config cfg, time_point now)
  : cfg_(std::move(cfg)), short_since_(now) {
}

decision job_rules::on_start(const std::vector<host_slots>& available, time_point now) {
  int slots = total_slots(available);
  if (slots >= cfg_.min_workers) {
    short_since_.reset();
    return decision{decision::action::publish};
  }
  return wait_or_time_out(available, " (" + cfg_.discovery + ")", now);
}

decision job_rules::wait_or_time_out(const std::vector<host_slots>& available,
                                     const std::string& suffix, time_point now) {
  if (!short_since_)
    short_since_ = now;
  if (now - *short_since_ < cfg_.wait)
    return decision{decision::action::wait};
  return failed(error_kind::elastic_timeout,
                fmt::format("Timed out waiting for minimum number of slots to become available: "
                            "wanted {}, saw {} on nodes [{}] after {} s{}",
                            cfg_.min_workers, total_slots(available), describe_hosts(available),
                            cfg_.timeout_seconds, suffix));
}

decision job_rules::short_of_slots(const world_state& s, time_point now) {
  if (s.hopeless)
    return failed(error_kind::worker_error,
                  fmt::format("every host of the elastic job is blacklisted after failures. "
                              "First failure: {}",
                              s.first_failure));
  return wait_or_time_out(s.available, "", now);
}

decision job_rules::next_world(const world_state& s, bool failure, time_point now) {
  failure = failure || broken_;
  bool any_state = false;
  for (auto& m : s.members)
    any_state = any_state || m.has_state;
  if (s.held_state && !any_state)
    return failed(error_kind::worker_error,
                  fmt::format("every worker that held the elastic job's state is gone, so its "
                              "last commit is lost. First failure: {}",
                              s.first_failure.empty() ? "none" : s.first_failure));
  auto plan = plan_world(s.available, s.members, cfg_.min_workers, cfg_.max_workers);
  if (!plan) {
    broken_ = broken_ || failure;
    return short_of_slots(s, now);
  }
  short_since_.reset();
  bool first = s.seats.empty();
  if (!failure && !first && same_world(*plan, s.seats))
    return decision{decision::action::keep};
  if (!failure && !first && !s.formed)
    return decision{decision::action::wait};
  if (!first) {
    if (cfg_.reset_limit && resets_ >= *cfg_.reset_limit)
      return failed(error_kind::reset_limit_exceeded,
                    fmt::format("hvactor was shut down because the number of resets during the "
                                "elastic job exceeded its limit: {}",
                                *cfg_.reset_limit));
    ++resets_;
  }
  broken_ = false;
  return decision{decision::action::publish, std::move(plan), failure};
}

} // namespace hvactor::elastic
