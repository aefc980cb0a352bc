#include "collectives/internal/stall_inspector.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace hvactor::collectives {

namespace {

std::string ranks_text(const stall_inspector::waiting& w) {
  if (!w.known)
    return "not known yet";
  return fmt::format("{}", fmt::join(w.missing, ", "));
}

} // namespace

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
  std::string list, summary;
  for (auto* w : stalled) {
    list += fmt::format("{}'{}' (ranks that have not submitted it: {})", list.empty() ? "" : ", ",
                        w->name, ranks_text(*w));
    summary += fmt::format("{}{}:{}", summary.empty() ? "" : ";", w->name,
                           w->known ? fmt::format("{}", fmt::join(w->missing, ",")) : "?");
  }
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(longest).count();
  v.summary = summary;
  if (s_.shutdown.count() > 0 && longest >= s_.shutdown) {
    v.shutdown = true;
    v.message = fmt::format(
      "hvd: rank {} of {} gave up after waiting {} s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS={}) for "
      "collectives that other ranks never submitted: {}. Every rank fails what it waits on",
      rank_, size_, secs, s_.shutdown.count(), list);
    return v;
  }
  if (last_warning_ != clock::time_point{} && now - last_warning_ < s_.warning)
    return v;
  last_warning_ = now;
  v.warning = fmt::format(
    "hvd: stall: rank {} of {} has waited {} s for collectives that other ranks have not "
    "submitted: {}. Those ranks are busy outside hvd calls or submit other names; this "
    "repeats every {} s (HOROVOD_STALL_CHECK_TIME_SECONDS){}",
    rank_, size_, secs, list, s_.warning.count(),
    s_.shutdown.count() > 0
      ? fmt::format(", and every rank fails after {} s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)",
                    s_.shutdown.count())
      : std::string{"; HOROVOD_STALL_SHUTDOWN_TIME_SECONDS > 0 ends the job instead"});
  return v;
}

} // namespace hvactor::collectives
