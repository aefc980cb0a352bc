#include "actors/node/node_colocator.hpp"

#include <signal.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <filesystem>
#include <map>
#include <optional>

#include "hvactor/event.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "actors/coordinator/output_window.hpp"
#include "actors/board/usage_pacer.hpp"
#include "base/internal/process.hpp"
#include "actors/node/worker_env.hpp"
#include "collectives/backends/shm/segment.hpp"
#include "collectives/observe/op_stats.hpp"

namespace hvactor {

namespace {

using namespace proto;
using namespace std::chrono_literals;

// One hvactor::log::event line of rank `rank` (without its marker), to the
// coordinator: a collective-totals event as the typed totals, any other as
// it came (the user's on_event decodes it). Runs on the rank's monitor
// thread, so decoding costs no actor time.
void send_event(const coordinator& coord, int32_t rank, std::string encoded) {
  if (encoded.find(collectives::op_stats_event) != std::string::npos) {
    std::map<std::string, std::string> fields;
    try {
      fields = log::decode_event(encoded);
    } catch (const std::exception&) {
    }
    if (fields["event"] == collectives::op_stats_event) {
      namespace lim = board_limits;
      std::vector<op_stat> ops;
      for (auto& t : collectives::decode_op_totals(fields["ops"], lim::max_metrics, lim::max_line))
        ops.push_back({std::move(t.op), std::move(t.path), t.count, t.bytes, t.seconds});
      caf::anon_send(coord, op_stats_atom_v, rank, std::move(ops));
      return;
    }
  }
  caf::anon_send(coord, event_atom_v, rank, std::move(encoded));
}

struct colocator_state {
  spawn_request req;
  reservation res;
  coordinator coord;
  node_agent agent;
  std::map<int32_t, std::shared_ptr<child_process>> children; // by world rank
  std::map<int32_t, std::shared_ptr<output_window>> windows;   // by world rank (launch)
  bool stopping = false;
  bool driver_lost = false;
  detail::usage_pacer usage; // when the dashboard gets a sample
  std::vector<caf::typed_response_promise<bool>> stop_promises;
  static inline const char* name = "node_colocator";
};

using colocator_actor = node_colocator::stateful_pointer<colocator_state>;

// A process's CPU time (user + system) and resident memory from /proc; false
// when it is gone.
bool read_usage(int pid, rank_stat& out) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line))
    return false;
  // The command name (field 2) may hold spaces and parentheses: fields 3
  // onwards start after its last ')'.
  auto close = line.rfind(')');
  if (close == std::string::npos)
    return false;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14)
      utime = std::stoull(field);
    else if (i == 15)
      stime = std::stoull(field);
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  unsigned long long size = 0, resident = 0;
  statm >> size >> resident;
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  out.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  out.rss_bytes = resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return true;
}

// Sends the coordinator its workers' usage, for the dashboard, when it
// changed; looks again while they run, less often while it does not
// (usage_pacer.hpp).
void sample(colocator_actor self) {
  auto& st = self->state;
  if (st.stopping || st.children.empty())
    return;
  rank_stats stats;
  for (auto& [rank, child] : st.children) {
    rank_stat s;
    s.id = rank;
    try {
      if (read_usage(child->pid(), s))
        stats.ranks.push_back(s);
    } catch (const std::exception&) {
      // a malformed /proc line: no sample this time
    }
  }
  if (!stats.ranks.empty() && st.usage.take(stats))
    self->send(st.coord, rank_stats_atom_v, std::move(stats));
  self->delayed_send(self, st.usage.next_wait(), sample_atom_v);
}

void finish_if_done(colocator_actor self) {
  auto& st = self->state;
  if (!st.stopping || !st.children.empty())
    return;
  caf::anon_send(st.agent, release_atom_v, st.req.job_id);
  for (auto& rp : st.stop_promises)
    rp.deliver(true);
  st.stop_promises.clear();
  self->quit();
}

// Graceful: workers got `stop` from the coordinator and normally leave on
// their own; SIGTERM after leave_grace, SIGKILL stop_grace later. With
// `sig == SIGKILL` (driver gone) at once.
void begin_stop(colocator_actor self, int sig) {
  auto& st = self->state;
  st.stopping = true;
  // Readers blocked on credit must drain their pipes so that the workers
  // can exit (and the launcher may be gone).
  for (auto& [rank, window] : st.windows)
    window->open();
  if (sig == SIGKILL)
    for (auto& [rank, child] : st.children)
      child->signal(SIGKILL);
  else
    self->delayed_send(self, knobs::leave_grace, sigterm_due_atom_v);
  finish_if_done(self);
}

// The job's shared-memory segment on this node (collectives/backends/shm/): one slot
// per worker started here (two or more; elastic jobs start workers one by
// one and use Gloo), inherited by each as HVACTOR_SHM_FD; the memory
// goes away with the last process that maps it. nullptr when the job turned
// it off or the node cannot make one (the workers then use Gloo's TCP).
std::shared_ptr<collectives::shm::segment> make_segment(const spawn_request& req) {
  // What the job did not say (spawn_request::shm), this node's settings say.
  bool wanted = req.shm >= 0 ? req.shm == 1 : env::get(env::shm).value_or("1") != "0";
  if (req.ranks.size() < 2 || !wanted)
    return nullptr;
  uint64_t slot = req.shm_slot_bytes;
  if (slot == 0)
    slot = shm_slot_bytes_for(env::get(env::fusion_threshold)
                                .value_or(std::to_string(knobs::shm_slot_bytes)));
  try {
    return collectives::shm::segment::create(static_cast<uint32_t>(req.ranks.size()), slot);
  } catch (const std::exception& e) {
    log::warn("job {}: no shared memory for its {} workers here ({}); they use Gloo's TCP",
              req.job_id, req.ranks.size(), e.what());
    return nullptr;
  }
}

void start_workers(colocator_actor self) {
  auto& st = self->state;
  auto segment = make_segment(st.req);
  // The node's whole reservation, as horovod.ray hands it out: every local
  // rank sees every GPU of its node's ranks (worker_env.hpp).
  auto cuda_devices = cuda_visible_devices(st.res.gpu_ids);
  for (size_t i = 0; i < st.req.ranks.size(); ++i) {
    auto rank = st.req.ranks[i];
    process_spec spec;
    spec.executable = st.req.executable;
    spec.args = st.req.args;
    spec.env = st.req.env.entries;
    if (st.req.launch) {
      // The user's SPMD program: its Horovod variables, and its output
      // goes to the launcher, line by line.
      if (i < st.req.rank_env.size())
        for (auto& kv : st.req.rank_env[i].entries)
          spec.env.push_back(kv);
      spec.capture_stdout = true;
      spec.echo_stderr = false;
    } else {
      spec.env.emplace_back(env::worker_rank, std::to_string(rank));
      spec.env.emplace_back(env::worker_node, st.res.node_id);
      if (st.req.output != output_inherit) {
        spec.capture_stdout = true;
        spec.echo_stderr = false;
        // Its stdout is a pipe now: the worker keeps it line-buffered.
        spec.env.emplace_back(env::worker_output, "lines");
      }
    }
    if (!st.res.gpu_ids.empty())
      spec.env.emplace_back(env::cuda_visible_devices, cuda_devices);
    spec.stderr_tail_lines = st.req.stderr_tail_lines;
    // Events (hvactor::log::event) always go to the coordinator; in launch
    // mode every other line too. Sent from the monitor thread, in order.
    spec.event_marker = log::event_marker;
    auto coord = st.coord;
    bool forward = st.req.launch || st.req.output == output_forward;
    auto marker = std::string{log::event_marker};
    auto handle = node_colocator{self};
    // Back-pressure: the monitor thread stops reading the rank's pipes
    // while the launcher has not written output_window_bytes of its lines.
    auto window = std::make_shared<output_window>();
    if (forward)
      st.windows[rank] = window;
    spec.on_line = [coord, rank, forward, marker, handle, window](int stream,
                                                                 const std::string& line) {
      if (stream == 2 && line.rfind(marker, 0) == 0) {
        send_event(coord, rank, line.substr(marker.size()));
      } else if (forward) {
        window->acquire(line.size() + 1);
        caf::send_as(handle, coord, output_atom_v, rank, static_cast<int32_t>(stream), line);
      }
    };
    if (segment) {
      spec.inherit_fd = segment->fd();
      spec.env.emplace_back(env::shm_fd, "4");
    }
    auto job = st.req.job_id;
    auto node = st.res.node_id;
    auto on_exit = [handle, job, node, rank, segment](process_exit ex) {
      // First: the worker's peers on this node stop waiting for it now.
      if (segment)
        segment->raise_abort(ex.pid, collectives::shm::abort_reason::exited);
      // On the reaper thread: what the worker left in its scratch dir goes
      // with it (a SIGKILLed worker cleans nothing up itself).
      remove_worker_scratch_dir(static_cast<int>(ex.pid));
      worker_exit report{job, rank, node, static_cast<int32_t>(ex.pid), ex.exit_code, ex.signal,
                         false, std::move(ex.stderr_tail)};
      caf::anon_send(handle, exited_atom_v, std::move(report));
    };
    try {
      st.children[rank] = child_process::start(spec, on_exit);
    } catch (const std::exception& e) {
      worker_exit report{job, rank, node, 0, 127, 0, false, {e.what()}};
      self->send(st.coord, exited_atom_v, std::move(report));
    }
  }
}

node_colocator::behavior_type colocator_impl(colocator_actor self, spawn_request req,
                                             reservation res, coordinator coord,
                                             node_agent agent) {
  self->set_exception_handler(exit_with_error("colocator of job " + req.job_id));
  auto& st = self->state;
  st.req = std::move(req);
  st.res = std::move(res);
  st.coord = coord;
  st.agent = agent;
  self->monitor(coord);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (dm.source != self->state.coord.address())
      return;
    log::info("driver of job {} went away ({}): killing its workers", self->state.req.job_id,
              caf::to_string(dm.reason));
    self->state.driver_lost = true;
    begin_stop(self, SIGKILL);
  });
  start_workers(self);
  self->delayed_send(self, std::chrono::milliseconds(200), sample_atom_v);
  return {
    [=](stop_atom) -> caf::result<bool> {
      auto rp = self->make_response_promise<bool>();
      self->state.stop_promises.push_back(rp);
      if (!self->state.stopping)
        begin_stop(self, SIGTERM);
      else
        finish_if_done(self);
      return rp;
    },
    [=](exited_atom, worker_exit& report) {
      auto& st = self->state;
      st.children.erase(report.world_rank);
      report.expected = st.stopping;
      if (!st.driver_lost)
        self->send(st.coord, exited_atom_v, std::move(report));
      finish_if_done(self);
    },
    [=](output_ack_atom, int32_t rank, uint64_t bytes) {
      if (auto i = self->state.windows.find(rank); i != self->state.windows.end())
        i->second->release(bytes);
    },
    [=](sigterm_due_atom) {
      for (auto& [rank, child] : self->state.children)
        child->signal(SIGTERM);
      if (!self->state.children.empty())
        self->delayed_send(self, knobs::stop_grace, sigkill_due_atom_v);
    },
    [=](sample_atom) { sample(self); },
    [=](ping_atom) { return static_cast<int32_t>(::getpid()); },
    [=](sigkill_due_atom) {
      for (auto& [rank, child] : self->state.children) {
        log::warn("worker rank {} (pid {}) ignored SIGTERM for {} s: sending SIGKILL", rank,
                  child->pid(), knobs::stop_grace.count());
        child->signal(SIGKILL);
      }
    },
  };
}

} // namespace

proto::node_colocator spawn_node_colocator(caf::actor_system& sys, proto::spawn_request req,
                                           proto::reservation res, proto::coordinator coord,
                                           proto::node_agent agent) {
  return sys.spawn(colocator_impl, std::move(req), std::move(res), coord, agent);
}

} // namespace hvactor
