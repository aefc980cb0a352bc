// The job as the head's dashboard shows it (board_types.hpp): the
// coordinator sends its registry a job_view at most every
// board_limits::job_interval while the job changes, and at once when it
// ends.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdlib>
#include <functional>

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/caf_error.hpp"
#include "base/net/net.hpp"
#include "hvactor/event.hpp"
#include "base/internal/env_names.hpp"

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
  return st.kind->worker_state(st, w);
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
  v.kind = st.kind->board_name();
  v.state = job_state(st);
  v.started_ms = st.board.started_ms;
  if (st.ph == phase::stopped)
    v.ended_ms = now_ms();
  v.size = st.kind->world_size(st);
  v.generation = st.kind->generation(st);
  v.resets = st.kind->resets(st);
  for (auto& [id, w] : st.workers) {
    rank_view r;
    r.id = id;
    r.rank = st.kind->rank_of(w);
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
  // Its job, or (elastic) one of its workers' sub-jobs "<job>.<id>".
  bool ours = ex.job_id == st.cfg.job_id || ex.job_id.rfind(st.cfg.job_id + ".", 0) == 0;
  if (ex.expected || !ours)
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

// A worker's stall warning is counted (and passed on to on_event).
void board_event(coord_actor self, const std::string& encoded) {
  if (encoded.find("stall") == std::string::npos)
    return;
  try {
    if (log::decode_event(encoded)["event"] != "stall")
      return;
  } catch (const std::exception&) {
    return;
  }
  ++self->state.board.stalls;
  board_changed(self);
}

void board_ops(coord_actor self, int32_t id, std::vector<op_stat> ops) {
  self->state.board.ops[id] = std::move(ops);
  board_changed(self);
}

class board_observer final : public job_observer {
public:
  void started(coord_actor self) override {
    board_publish(self);
  }
  void changed(coord_actor self) override {
    board_changed(self);
  }
  void due(coord_actor self) override {
    board_due(self);
  }
  void ended(coord_actor self, std::function<void()> then) override {
    board_final(self, std::move(then));
  }
  void worker_exited(coord_actor self, const worker_exit& ex) override {
    board_exit(self, ex);
  }
  void worker_failed(coord_actor self, int32_t id, const std::string& why) override {
    board_failed(self, id, why);
  }
  void output(coord_actor self, int32_t id, const std::string& line) override {
    board_output(self, id, line);
  }
  void usage(coord_actor self, const rank_stats& stats) override {
    board_stats(self, stats);
  }
  void event(coord_actor self, const std::string& encoded) override {
    board_event(self, encoded);
  }
  void totals(coord_actor self, int32_t id, std::vector<op_stat> ops) override {
    board_ops(self, id, std::move(ops));
  }
};

} // namespace

std::unique_ptr<job_observer> make_board_observer() {
  return std::make_unique<board_observer>();
}

void on_event(coord_actor self, int32_t id, const std::string& encoded) {
  auto& st = self->state;
  if (!st.cfg.on_event)
    return;
  // Events name the worker's rank now (elastic ranks change across
  // generations); its id when it has none.
  int rank = id;
  if (auto i = st.workers.find(id); i != st.workers.end() && st.kind->rank_of(i->second) >= 0)
    rank = st.kind->rank_of(i->second);
  try {
    st.cfg.on_event(rank, log::decode_event(encoded));
  } catch (const std::exception& e) {
    fail(self, make_error(error_kind::generic,
                          fmt::format("the on_event callback threw on an event of {} {}: {}",
                                      st.kind->worker_noun(), id, e.what())));
  }
}

} // namespace hvactor::detail
