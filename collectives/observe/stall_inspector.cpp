#include "collectives/observe/stall_inspector.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace hvactor::collectives {

// "rank 2 of 4", or in a process set "rank 3 (rank 1 of 2 in process set
// 1: ranks 2, 3)".
std::string stall_inspector::who() const {
  if (s_.members.empty())
    return fmt::format("rank {} of {}", rank_, size_);
  return fmt::format("rank {} (rank {} of {} in process set {}: ranks {})", job_rank(), rank_,
                     size_, s_.process_set, fmt::join(s_.members, ", "));
}

// The stalled entries, for a message ("'grad/a' (ranks that have not
// submitted it: 1, 2), ...") or the event's summary ("grad/a:1,2;x:?"),
// ranks in the job's numbering.
std::string stall_inspector::listed(const std::vector<const waiting*>& stalled,
                                    bool summary) const {
  std::string out;
  for (auto* w : stalled) {
    std::vector<int> ranks;
    for (int r : w->missing)
      ranks.push_back(job_rank_of(r));
    if (summary) {
      out += fmt::format("{}{}:{}", out.empty() ? "" : ";", w->join ? "join()" : w->name,
                         w->known ? fmt::format("{}", fmt::join(ranks, ",")) : "?");
      continue;
    }
    auto text = !w->known      ? std::string{"not known yet"}
                : ranks.empty() ? std::string{"none"}
                                : fmt::format("{}", fmt::join(ranks, ", "));
    if (w->join)
      out += fmt::format("{}hvd::join() (ranks that have not joined: {})", out.empty() ? "" : ", ",
                         text);
    else
      out += fmt::format("{}'{}' (ranks that have not submitted it: {})", out.empty() ? "" : ", ",
                         w->name, text);
  }
  return out;
}

stall_inspector::verdict stall_inspector::check(clock::time_point now,
                                                const std::vector<waiting>& ops) {
  verdict v;
  if (s_.disabled)
    return v;
  std::vector<const waiting*> stalled;
  auto longest = clock::duration::zero();
  for (auto& w : ops)
    if (now - w.submitted >= s_.warning) {
      stalled.push_back(&w);
      longest = std::max(longest, now - w.submitted);
    }
  if (stalled.empty())
    return v;
  auto list = listed(stalled, false);
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(longest).count();
  v.summary = listed(stalled, true);
  if (s_.shutdown.count() > 0 && longest >= s_.shutdown) {
    v.shutdown = true;
    v.message = fmt::format(
      "hvd: {} gave up after waiting {} s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS={}) for other "
      "ranks: {}. Every rank fails what it waits on",
      who(), secs, s_.shutdown.count(), list);
    shutdown_message_ = v.message;
    return v;
  }
  if (last_warning_ != clock::time_point{} && now - last_warning_ < s_.warning)
    return v;
  last_warning_ = now;
  v.warning = fmt::format(
    "hvd: stall: {} has waited {} s for other ranks: {}. Those ranks are busy outside hvd calls "
    "or submit other names; this repeats every {} s (HOROVOD_STALL_CHECK_TIME_SECONDS){}",
    who(), secs, list, s_.warning.count(),
    s_.shutdown.count() > 0
      ? fmt::format(", and every rank fails after {} s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)",
                    s_.shutdown.count())
      : std::string{"; HOROVOD_STALL_SHUTDOWN_TIME_SECONDS > 0 ends the job instead"});
  return v;
}

} // namespace hvactor::collectives
