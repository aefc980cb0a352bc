// hvactor-run jobs: the coordinator starts the user's SPMD program on every
// slot (no hvactor worker inside), forwards its output, and ends the job
// when every process exited, or with the first one that failed.

#include <fmt/format.h>

#include "internal/coordinator_state.hpp"
#include "internal/process.hpp"
#include "internal/system_config.hpp"

namespace hvactor::detail {

using namespace proto;
using namespace std::chrono_literals;

void launch_started(coord_actor self) {
  auto& st = self->state;
  if (!st.start_pending || st.ph != phase::registering)
    return;
  st.ph = phase::ready;
  st.start_pending = false;
  job_info info{st.cfg.job_id, st.size(), {}, {}, st.shipped_bytes};
  for (auto& w : st.workers) {
    info.nodes.push_back(w.node_id);
    info.pids.push_back(0);
  }
  st.start_promise.deliver(std::move(info));
}

void launch_exited(coord_actor self, const worker_exit& ex, caf::error err) {
  auto& st = self->state;
  if (st.launch_done)
    return;
  if (ex.exit_code == 0 && ex.signal == 0) {
    if (++st.exited_ok == st.workers.size()) {
      job_exit out;
      out.ok = true;
      out.message = fmt::format("all {} processes exited with status 0", st.size());
      finish_launch(self, std::move(out));
    }
    return;
  }
  if (st.failure)
    return; // not the first
  job_exit out;
  out.rank = ex.world_rank;
  out.node_id = ex.node_id;
  out.pid = ex.pid;
  out.exit_code = ex.exit_code;
  out.signal = ex.signal;
  out.stderr_tail = ex.stderr_tail;
  if (ex.pid == 0) // its colocator could not start it (exec failed)
    out.message = fmt::format("rank {} on node '{}' could not be started: {}", ex.world_rank,
                              ex.node_id,
                              ex.stderr_tail.empty() ? describe_exit(ex.exit_code, ex.signal)
                                                     : ex.stderr_tail.front());
  else
    out.message = fmt::format("one or more processes exited with non-zero status; the first was "
                              "rank {} on node '{}' (pid {}): {}",
                              ex.world_rank, ex.node_id, ex.pid,
                              describe_exit(ex.exit_code, ex.signal));
  st.failure = err; // later calls and a late start() see it
  st.outcome = std::move(out);
  // Peers that were inside a collective with the failed rank fail too:
  // report the first failure once the others had a moment to exit.
  self->delayed_send(self, knobs::launch_failure_grace, launch_finish_atom_v);
}

void finish_launch(coord_actor self, job_exit out) {
  auto& st = self->state;
  if (st.launch_done)
    return;
  st.launch_done = true;
  st.outcome = std::move(out);
  for (auto& rp : st.finished_promises)
    rp.deliver(st.outcome);
  st.finished_promises.clear();
}

} // namespace hvactor::detail
