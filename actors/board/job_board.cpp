#include "actors/board/job_board.hpp"
#include "base/internal/utf8.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

namespace hvactor {

namespace lim = proto::board_limits;

namespace {

void cut(std::string& s, size_t n, bool distinct = false) {
  s = board_text(s, n, distinct);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

void cut(std::vector<std::string>& lines, size_t keep_last, size_t line) {
  if (lines.size() > keep_last)
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(keep_last));
  for (auto& l : lines)
    cut(l, line);
}

// Drops every other point but the first and the latest: the curve keeps its
// shape over the whole run at half the resolution.
void thin(std::vector<proto::train_point>& points) {
  std::vector<proto::train_point> kept;
  kept.reserve(points.size() / 2 + 2);
  for (size_t i = 0; i < points.size(); ++i)
    if (i % 2 == 0 || i + 1 == points.size())
      kept.push_back(std::move(points[i]));
  points = std::move(kept);
}

} // namespace

std::string board_text(std::string_view s, size_t max, bool distinct) {
  std::string out;
  out.reserve(std::min(s.size(), max));
  bool replaced = false;
  size_t i = 0;
  while (i < s.size() && out.size() <= max) {
    if (auto n = utf8::sequence_length(s, i)) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd"; // U+FFFD
      replaced = true;
      ++i;
    }
  }
  bool too_long = i < s.size() || out.size() > max;
  if (!too_long && (!replaced || !distinct))
    return out;
  char tag[18] = "";
  if (distinct)
    std::snprintf(tag, sizeof(tag), "~%016llx", static_cast<unsigned long long>(fnv1a(s)));
  size_t room = max > std::strlen(tag) ? max - std::strlen(tag) : 0;
  if (out.size() > room) {
    size_t end = room;
    while (end > 0 && (static_cast<unsigned char>(out[end]) & 0xC0) == 0x80)
      --end; // not inside a character
    out.resize(end);
  }
  return out + tag;
}

bool job_ended(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "lost";
}

void job_board::update(proto::job_view view, uint64_t driver) {
  cut(view.job_id, lim::max_line, true);
  cut(view.failures, lim::max_failures, 4 * lim::max_line);
  cut(view.log_tail, lim::log_lines, lim::max_line);
  auto& e = jobs_[view.job_id];
  if (e.order == 0)
    e.order = ++next_;
  else if (job_ended(e.view.state) || e.driver != driver)
    return; // an end is final; a live job is only its own driver's to describe
  e.view = std::move(view);
  e.driver = driver;
  trim();
}

void job_board::report(proto::train_point point) {
  if (point.metrics.size() > lim::max_metrics)
    point.metrics.resize(lim::max_metrics);
  std::set<std::string> names; // a name sent twice is kept once, the first
  auto& ms = point.metrics;
  ms.erase(std::remove_if(ms.begin(), ms.end(),
                          [&](auto& m) {
                            cut(m.first, lim::max_line, true);
                            return !names.insert(m.first).second;
                          }),
           ms.end());
  cut(point.run, lim::max_line, true);
  cut(point.storage, 4 * lim::max_line, true);
  cut(point.checkpoint, 4 * lim::max_line);
  cut(point.experiment, lim::max_line, true);
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const proto::train_run& r) {
    return r.storage == point.storage && r.run == point.run;
  });
  if (it == runs_.end()) {
    proto::train_run run;
    run.job_id = point.job_id;
    run.run = point.run;
    run.storage = point.storage;
    runs_.push_back(std::move(run));
    if (runs_.size() > lim::max_runs)
      runs_.pop_front();
    it = runs_.end() - 1;
  }
  it->job_id = point.job_id; // a new attempt runs as a new job
  it->experiment = point.experiment;
  ++it->reports;
  if (!point.checkpoint.empty()) {
    it->checkpoints.push_back(point.checkpoint);
    cut(it->checkpoints, lim::log_lines, 4 * lim::max_line);
  }
  it->points.push_back(std::move(point));
  if (it->points.size() > lim::max_points)
    thin(it->points);
}

bool job_board::driver_lost(uint64_t driver, int64_t now_ms) {
  bool any = false;
  for (auto& [id, e] : jobs_)
    if (e.driver == driver && !job_ended(e.view.state)) {
      e.view.state = "lost";
      e.view.ended_ms = now_ms;
      e.view.failures.push_back("the driver went away before the job ended");
      any = true;
    }
  trim();
  return any;
}

bool job_board::knows(uint64_t driver) const {
  return std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& kv) {
    return kv.second.driver == driver && !job_ended(kv.second.view.state);
  });
}

// Keeps the newest finished jobs, and at most max_jobs in all (the oldest
// go first, live or not: no driver can make the head grow without bound).
void job_board::trim() {
  std::vector<std::pair<uint64_t, std::string>> ended, all;
  for (auto& [id, e] : jobs_) {
    if (job_ended(e.view.state))
      ended.emplace_back(e.order, id);
    all.emplace_back(e.order, id);
  }
  std::sort(ended.begin(), ended.end());
  for (size_t i = 0; i + lim::max_finished_jobs < ended.size(); ++i)
    jobs_.erase(ended[i].second);
  if (jobs_.size() <= lim::max_jobs)
    return;
  std::sort(all.begin(), all.end());
  for (size_t i = 0; jobs_.size() > lim::max_jobs && i < all.size(); ++i)
    jobs_.erase(all[i].second);
}

proto::board job_board::snapshot() const {
  proto::board b;
  std::vector<const entry*> order;
  for (auto& [id, e] : jobs_)
    order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const entry* a, const entry* b) { return a->order > b->order; });
  for (auto* e : order)
    b.jobs.push_back(e->view);
  b.runs.assign(runs_.rbegin(), runs_.rend());
  return b;
}

} // namespace hvactor
