// The job as the head's dashboard shows it (board_types.hpp): the
// coordinator sends its registry a job_view at most every
// board_limits::job_interval while the job changes, and at once when it
// ends.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <functional>

#include <fmt/format.h>

#include "actors/internal/coordinator_state.hpp"
#include "base/internal/caf_error.hpp"
#include "base/net/net.hpp"
#include "hvactor/event.hpp"

namespace hvactor::detail {

using namespace proto;
namespace lim = board_limits;

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string job_state(const coordinator_state& st) {
  switch (st.ph) {
    case phase::idle:
    case phase::placing:
      return "placing";
    case phase::shipping:
    case phase::registering:
      return "starting";
    case phase::ready:
    case phase::running:
    case phase::finishing:
      return "running";
    case phase::stopping:
      return "stopping";
    case phase::stopped:
      break;
  }
  bool failed = st.failure || (st.outcome && !st.outcome->ok && st.cfg.launch);
  return failed ? "failed" : "succeeded";
}

std::string worker_state(const coordinator_state& st, const job_worker& w) {
  if (auto i = st.board.ended.find(w.id); i != st.board.ended.end())
    return i->second;
  if (st.elastic()) {
    auto* e = st.el.registry.find(w.id);
    if (e == nullptr)
      return "starting";
    switch (e->phase) {
      case elastic::worker_phase::starting:
        return "starting";
      case elastic::worker_phase::running:
        return w.returned ? "returned" : "running";
      case elastic::worker_phase::leaving:
        return "leaving";
      case elastic::worker_phase::gone:
        return "exited";
    }
  }
  if (st.ph == phase::stopped)
    return "exited";
  return w.registered ? "running" : "starting";
}

std::string timeline_of(const coordinator_state& st) {
  auto& extra = st.cfg.options.extra_env_vars;
  if (auto i = extra.find(env::timeline); i != extra.end())
    return i->second;
  const char* v = std::getenv(env::timeline);
  return v ? v : "";
}

job_view make_view(const coordinator_state& st) {
  job_view v;
  v.job_id = st.cfg.job_id;
  v.driver = fmt::format("{} (pid {})", net::host_name(), ::getpid());
  v.kind = st.cfg.launch ? (st.elastic() ? "run-elastic" : "run")
                         : (st.elastic() ? "elastic" : "executor");
  v.state = job_state(st);
  v.started_ms = st.board.started_ms;
  if (st.ph == phase::stopped)
    v.ended_ms = now_ms();
  v.size = st.elastic() ? static_cast<int32_t>(st.el.seats.size()) : st.size();
  if (st.elastic()) {
    v.generation = st.el.generation;
    v.resets = st.el.rules.resets();
  }
  for (auto& [id, w] : st.workers) {
    rank_view r;
    r.id = id;
    r.rank = st.elastic() ? w.rank : id;
    r.node = w.node;
    r.pid = w.pid;
    r.state = worker_state(st, w);
    if (auto s = st.board.stats.find(id); s != st.board.stats.end()) {
      r.cpu_seconds = s->second.cpu_seconds;
      r.rss_bytes = s->second.rss_bytes;
    }
    v.ranks.push_back(std::move(r));
  }
  v.failures.assign(st.board.failures.begin(), st.board.failures.end());
  if (st.failure)
    v.failures.push_back(describe(st.failure));
  v.log_tail.assign(st.board.log_tail.begin(), st.board.log_tail.end());
  v.timeline = timeline_of(st);
  std::map<std::pair<std::string, std::string>, op_stat> ops;
  for (auto& [id, mine] : st.board.ops)
    for (auto& s : mine) {
      auto& t = ops[{s.op, s.path}];
      t.op = s.op;
      t.path = s.path;
      t.count += s.count;
      t.bytes += s.bytes;
      t.seconds += s.seconds;
    }
  for (auto& [key, t] : ops)
    v.ops.push_back(t);
  v.stalls = st.board.stalls;
  return v;
}

} // namespace

void board_publish(coord_actor self) {
  auto& st = self->state;
  if (!st.cfg.registry)
    return;
  if (st.board.started_ms == 0)
    st.board.started_ms = now_ms();
  self->send(st.cfg.registry, job_view_atom_v, make_view(st));
}

void board_final(coord_actor self, std::function<void()> then) {
  auto& st = self->state;
  if (!st.cfg.registry) {
    then();
    return;
  }
  self->request(st.cfg.registry, lim::final_bound, job_end_atom_v, make_view(st))
    .then([then](bool) { then(); }, [then](caf::error&) { then(); });
}

void board_changed(coord_actor self) {
  auto& st = self->state;
  if (!st.cfg.registry || st.board.pending)
    return;
  st.board.pending = true;
  self->delayed_send(self, lim::job_interval, board_due_atom_v);
}

void board_due(coord_actor self) {
  self->state.board.pending = false;
  board_publish(self);
}

void board_exit(coord_actor self, const worker_exit& ex) {
  auto& st = self->state;
  board_changed(self);
  if (ex.expected || (ex.job_id != st.cfg.job_id && !st.elastic()))
    return;
  bool ok = ex.exit_code == 0 && ex.signal == 0;
  st.board.ended[ex.world_rank] = ok ? "exited" : "failed";
  if (ok)
    return;
  auto how = ex.signal != 0 ? fmt::format("was killed by signal {}", ex.signal)
                            : fmt::format("exited with code {}", ex.exit_code);
  auto line = fmt::format("worker {} on node '{}' (pid {}) {}", ex.world_rank, ex.node_id, ex.pid,
                          how);
  if (!ex.stderr_tail.empty())
    line += ": " + ex.stderr_tail.back();
  st.board.failures.push_back(std::move(line));
  while (st.board.failures.size() > lim::max_failures)
    st.board.failures.pop_front();
}

void board_failed(coord_actor self, int32_t id, const std::string& why) {
  auto& st = self->state;
  board_changed(self);
  auto& state = st.board.ended[id];
  if (state == "failed")
    return; // its exit report is already kept
  state = "failed";
  st.board.failures.push_back(why);
  while (st.board.failures.size() > lim::max_failures)
    st.board.failures.pop_front();
}

void board_output(coord_actor self, int32_t id, const std::string& line) {
  auto& st = self->state;
  board_changed(self);
  auto text = fmt::format("[{}] {}", id, line.substr(0, lim::max_line));
  st.board.log_tail.push_back(std::move(text));
  while (st.board.log_tail.size() > lim::log_lines)
    st.board.log_tail.pop_front();
}

void board_stats(coord_actor self, const rank_stats& stats) {
  auto& st = self->state;
  board_changed(self);
  for (auto& s : stats.ranks)
    if (st.workers.count(s.id) != 0)
      st.board.stats[s.id] = s;
}

// A worker's hvactor.collectives event: its totals replace its earlier ones
// (consumed here); a stall warning is counted (and passed on).
bool board_event(coord_actor self, int32_t id, const std::string& encoded) {
  auto& st = self->state;
  if (encoded.find("hvactor.collectives") == std::string::npos
      && encoded.find("stall") == std::string::npos)
    return false;
  std::map<std::string, std::string> fields;
  try {
    fields = log::decode_event(encoded);
  } catch (const std::exception&) {
    return false;
  }
  auto kind = fields["event"];
  if (kind == "stall") {
    ++st.board.stalls;
    board_changed(self);
    return false;
  }
  if (kind != "hvactor.collectives")
    return false;
  auto& mine = st.board.ops[id];
  mine.clear();
  std::string_view rest = fields["ops"];
  while (!rest.empty() && mine.size() < lim::max_metrics) {
    auto item = rest.substr(0, rest.find(';'));
    rest.remove_prefix(std::min(rest.size(), item.size() + 1));
    op_stat s;
    auto slash = item.find('/'), eq = item.find('=');
    if (slash == std::string_view::npos || eq == std::string_view::npos || eq < slash)
      continue;
    s.op = std::string{item.substr(0, slash)}.substr(0, lim::max_line);
    s.path = std::string{item.substr(slash + 1, eq - slash - 1)}.substr(0, lim::max_line);
    if (std::sscanf(std::string{item.substr(eq + 1)}.c_str(), "%" SCNu64 ",%" SCNu64 ",%lf",
                    &s.count, &s.bytes, &s.seconds)
        == 3)
      mine.push_back(std::move(s));
  }
  board_changed(self);
  return true;
}

void on_event(coord_actor self, int32_t id, const std::string& encoded) {
  auto& st = self->state;
  if (board_event(self, id, encoded) || !st.cfg.on_event)
    return;
  // Elastic events name the worker id: ranks change across generations.
  int rank = id;
  if (auto i = st.workers.find(id); st.elastic() && i != st.workers.end() && i->second.rank >= 0)
    rank = i->second.rank;
  try {
    st.cfg.on_event(rank, log::decode_event(encoded));
  } catch (const std::exception& e) {
    fail(self, make_error(error_kind::generic,
                          fmt::format("the on_event callback threw on an event of {} {}: {}",
                                      st.elastic() ? "worker" : "rank", id, e.what())));
  }
}

} // namespace hvactor::detail
