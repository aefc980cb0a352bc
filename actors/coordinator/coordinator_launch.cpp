// hvactor-run static jobs: the user's SPMD program runs on every slot (no
// hvactor worker inside); the job's outcome comes when every process
// exited, or from the first one that failed (static_roster.hpp decides).

#include <fmt/format.h>

#include "actors/coordinator/coordinator_state.hpp"
#include "base/internal/process.hpp"
#include "actors/protocol/system_config.hpp"
#include "base/internal/knobs_jobs.hpp"

namespace hvactor::detail {

using namespace proto;
using namespace std::chrono_literals;

void launch_exited(coord_actor self, const worker_exit& ex, caf::error err) {
  auto& st = self->state;
  if (st.outcome)
    return;
  bool ok = ex.exit_code == 0 && ex.signal == 0;
  switch (st.fixed.roster.exited(ex.world_rank, ok)) {
    case static_roster::launch_next::all_ok: {
      job_exit out;
      out.ok = true;
      out.message = fmt::format("all {} processes exited with status 0", st.size());
      finish(self, std::move(out));
      return;
    }
    case static_roster::launch_next::first_failure:
      break;
    case static_roster::launch_next::wait:
    case static_roster::launch_next::later_failure:
      return;
  }
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
  st.fixed.pending_outcome = std::move(out);
  // Peers that were inside a collective with the failed rank fail too:
  // report the first failure once the others had a moment to exit.
  self->delayed_send(self, knobs::launch_failure_grace, launch_finish_atom_v);
}

} // namespace hvactor::detail
