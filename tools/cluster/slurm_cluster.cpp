#include "tools/cluster/slurm_cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "base/net/net.hpp"
#include "base/internal/owned_dir.hpp"
#include "tools/cluster/head_address.hpp"
#include "tools/cluster/node_options.hpp"
#include "tools/cluster/readiness.hpp"

namespace hvactor::cluster {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// What the children's monitor threads report.
struct slurm_cluster::shared {
  std::mutex mu;
  std::condition_variable cv;
  std::string head_address;
  bool head_exited = false;
  bool step_exited = false;
  std::string step_exit;
  /// Nodes whose task srun reported as failed.
  std::set<std::string> failed;
  /// The last lines of the step's stderr (srun's and the nodes').
  std::deque<std::string> step_lines;
  std::vector<std::string> head_tail;

  void add_step_line(const std::string& line) {
    std::lock_guard<std::mutex> lk{mu};
    step_lines.push_back(line);
    if (step_lines.size() > 20)
      step_lines.pop_front();
    static const std::regex task_failed{R"(srun: error: ([^:\s]+): task)"};
    std::smatch m;
    if (std::regex_search(line, m, task_failed))
      failed.insert(m[1].str());
    cv.notify_all();
  }

  std::string step_tail() {
    std::string out;
    for (auto& l : step_lines)
      out += "\n  " + l;
    return out;
  }
};

namespace {

// At most `limit` of `names`, then how many more: a message stays short
// when an allocation has thousands of nodes.
template <class Names>
std::string some_names(const Names& names, const char* sep = ",", size_t limit = 8) {
  if (names.size() <= limit)
    return fmt::format("{}", fmt::join(names, sep));
  auto end = names.begin();
  std::advance(end, limit);
  return fmt::format("{}{}... ({} more)", fmt::join(names.begin(), end, sep), sep,
                     names.size() - limit);
}

} // namespace

slurm_cluster::slurm_cluster(const slurm::allocation& alloc, slurm_cluster_options opts)
  : opts_(std::move(opts)), job_id_(alloc.job_id), state_(std::make_shared<shared>()) {
  auto bind = choose_head_address(alloc.nodes, opts_.bind, opts_.timeout);
  bind_ = bind.address;
  fmt::print(stderr, "hvactor-run: Slurm job {}: {} node{} ({}); head on {} ({})\n",
             alloc.job_id, alloc.nodes.size(), alloc.nodes.size() == 1 ? "" : "s",
             some_names(alloc.nodes), bind_, bind.why);
  try {
    // allocation_from_env checked the job id and the node names; the
    // directories are made new by this run and only they are removed.
    if (!net::is_loopback(bind_)) {
      // Off loopback the job is mutual TLS: a CA of its own, a certificate
      // per node, for the head and for the driver, on the shared home.
      const char* home = std::getenv("HOME");
      tls_dir_ = owned_dir::make(home && home[0] == '/' ? home : "/tmp",
                                 {".hvactor", "slurm-" + alloc.job_id + ".XXXXXX"},
                                 "the per-job TLS directory");
      auto names = alloc.nodes;
      names.insert(names.end(), {"head", "driver"});
      tls_layout{tls_dir_.path()}.make(names, {"IP:" + bind_});
    }
    work_dir_ = owned_dir::make(temp_root(),
                                {fmt::format("hvactor-{}", ::getuid()),
                                 "slurm-" + alloc.job_id + "-head.XXXXXX"},
                                "the head's work directory");
    start_head(alloc);
    start_nodes(alloc);
    wait_until_joined(alloc);
  } catch (...) {
    stop();
    throw;
  }
}

slurm_cluster::~slurm_cluster() {
  stop();
}

tls::config slurm_cluster::identity(const std::string& name) const {
  if (tls_dir_.path().empty())
    return {};
  return tls_layout{tls_dir_.path()}.identity(name);
}

tls::config slurm_cluster::driver_tls() const {
  return identity("driver");
}

void slurm_cluster::start_head(const slurm::allocation& alloc) {
  // A node id has no '+' (a heterogeneous component's "N+M").
  auto head_id = "hvactor-run-" + alloc.job_id;
  std::replace(head_id.begin(), head_id.end(), '+', '_');
  node_command head;
  head.binary = opts_.node_binary;
  head.head = true;
  head.port = 0;
  head.bind = head.node_ip = bind_;
  head.num_cpus = head.num_gpus = 0;
  head.node_id = head_id;
  head.work_dir = work_dir_.path();
  head.tls = identity("head");
  process_spec spec;
  spec.executable = opts_.node_binary;
  spec.args = head.argv();
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  auto st = state_;
  spec.on_line = [st](int stream, const std::string& line) {
    if (auto address = stream == 1 ? listening_address(line) : std::nullopt) {
      std::lock_guard<std::mutex> lk{st->mu};
      st->head_address = *address;
      st->cv.notify_all();
    }
  };
  head_ = child_process::start(spec, [st](process_exit ex) {
    std::lock_guard<std::mutex> lk{st->mu};
    st->head_exited = true;
    st->head_tail = std::move(ex.stderr_tail);
    st->cv.notify_all();
  });
  std::unique_lock<std::mutex> lk{state_->mu};
  if (!state_->cv.wait_for(lk, opts_.timeout,
                           [&] { return !state_->head_address.empty() || state_->head_exited; })
      || state_->head_address.empty())
    throw error(fmt::format("the head ({} --head) did not start within {} s{}: {}",
                            opts_.node_binary, opts_.timeout.count(),
                            state_->head_exited ? " (it exited)" : "",
                            fmt::join(state_->head_tail, " | ")));
  address_ = state_->head_address;
}

void slurm_cluster::start_nodes(const slurm::allocation& alloc) {
  auto n = std::to_string(alloc.nodes.size());
  process_spec spec;
  spec.executable = find_program("srun");
  // An explicit --ntasks: srun must not take the job's SLURM_NTASKS
  // (docs/development/platform-notes.md, "Slurm: srun inherits the job's
  // task count"). --overlap: the user's own steps share the nodes.
  spec.args = {"srun", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--overlap",
               "--kill-on-bad-exit=0", "--job-name=hvactor-node"};
  if (!alloc.cpus.empty())
    spec.args.push_back(
      fmt::format("--cpus-per-task={}", *std::min_element(alloc.cpus.begin(), alloc.cpus.end())));
  if (alloc.gpus_per_node > 0)
    spec.args.push_back(fmt::format("--gres=gpu:{}", alloc.gpus_per_node));
  node_command node;
  node.binary = opts_.node_binary;
  node.slurm = true;
  node.address = address_;
  node.exit_on_head_loss = true;
  node.connect_timeout_s = static_cast<int>(opts_.timeout.count());
  node.tls_dir = tls_dir_.path();
  auto argv = node.argv();
  spec.args.insert(spec.args.end(), argv.begin(), argv.end());
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  auto st = state_;
  spec.on_line = [st](int stream, const std::string& line) {
    if (stream == 2)
      st->add_step_line(line);
    else
      log::debug("srun: {}", line);
  };
  spec.stderr_tail_lines = 0;
  log::info("starting the nodes: {}", fmt::join(spec.args, " "));
  step_ = child_process::start(spec, [st](process_exit ex) {
    std::lock_guard<std::mutex> lk{st->mu};
    st->step_exited = true;
    st->step_exit = describe_exit(ex.exit_code, ex.signal);
    st->cv.notify_all();
  });
}

void slurm_cluster::wait_until_joined(const slurm::allocation& alloc) {
  auto st = state_;
  auto joined_list = [](const readiness& r) {
    return r.joined.empty() ? std::string{"none"} : some_names(r.joined, ", ");
  };
  // Called with st->mu held.
  auto never_joined = [&](const readiness& r) {
    std::string why =
      !st->failed.empty()
        ? fmt::format("the hvactor-node task on {} failed", some_names(st->failed, ", "))
      : st->step_exited ? "the srun step ended (" + st->step_exit + ")"
                        : fmt::format("not within {} s{}", opts_.timeout.count(),
                                      r.head_answered ? std::string{}
                                                      : " (the head did not answer: "
                                                          + r.head_error + ")");
    return error(fmt::format("node{} {} of Slurm job {} never joined the head at {}: {}; joined: "
                             "{}. Last lines of the srun step:{}",
                             r.missing.size() == 1 ? "" : "s", some_names(r.missing, ", "),
                             alloc.job_id, address_, why, joined_list(r), st->step_tail()));
  };
  auto r = wait_for_nodes(
    address_, driver_tls(), alloc.nodes, opts_.timeout,
    [&](const readiness& now, std::chrono::milliseconds pause) {
      std::unique_lock<std::mutex> lk{st->mu};
      if (!st->failed.empty()) {
        // The failed task's own last words may still be on their way.
        st->cv.wait_for(lk, 300ms);
        throw error(fmt::format(
          "hvactor-node on node{} {} of Slurm job {} failed before joining the head at {} "
          "(joined: {}). Last lines of the srun step:{}",
          st->failed.size() == 1 ? "" : "s", some_names(st->failed, ", "), alloc.job_id,
          address_, joined_list(now), st->step_tail()));
      }
      if (st->step_exited)
        throw never_joined(now);
      st->cv.wait_for(lk, pause);
    });
  if (!r.ready()) {
    std::lock_guard<std::mutex> lk{st->mu};
    throw never_joined(r);
  }
}

namespace {

// Runs a Slurm command, its output discarded, for at most 10 s; its stdout.
std::string run_quietly(std::vector<std::string> argv) {
  process_spec spec;
  try {
    spec.executable = find_program(argv.front());
  } catch (const std::exception&) {
    return {};
  }
  spec.args = std::move(argv);
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  auto out = std::make_shared<std::string>();
  spec.on_line = [out](int stream, const std::string& line) {
    if (stream == 1)
      *out += line + "\n";
  };
  std::promise<void> done;
  auto ended = done.get_future();
  auto child = child_process::start(spec, [&done](process_exit) { done.set_value(); });
  if (ended.wait_for(10s) != std::future_status::ready) {
    child->signal(SIGKILL);
    ended.wait();
  }
  return *out;
}

} // namespace

// "JOB.STEP" of the nodes' step (named hvactor-node), from squeue.
std::string slurm_cluster::step_id() const {
  auto out = run_quietly({"squeue", "-h", "-s", "-j", job_id_, "-o", "%i %j"});
  std::istringstream in{out};
  for (std::string id, name; in >> id >> name;)
    if (name == "hvactor-node")
      return id;
  return {};
}

void slurm_cluster::stop() {
  auto wait_gone = [](const std::shared_ptr<child_process>& p, std::chrono::milliseconds limit) {
    auto end = clock_type::now() + limit;
    while (p && p->running() && clock_type::now() < end)
      std::this_thread::sleep_for(20ms);
    return !p || !p->running();
  };
  // Closing the head ends every node (--exit-on-head-loss), and so the
  // step. Never SIGTERM srun first: it SIGKILLs the tasks (notes 1.7).
  if (head_)
    head_->signal(SIGTERM);
  if (step_ && !wait_gone(step_, 15s)) {
    // scancel --signal=TERM on the step: its tasks get SIGTERM (and stop
    // their workers); only then srun itself.
    log::warn("the srun step of the nodes did not end after the head closed; scancel it");
    if (auto id = step_id(); !id.empty())
      run_quietly({"scancel", "--signal=TERM", id});
    if (!wait_gone(step_, 5s)) {
      step_->signal(SIGTERM);
      if (!wait_gone(step_, 5s))
        step_->signal(SIGKILL);
      wait_gone(step_, 5s);
    }
  }
  if (head_ && !wait_gone(head_, 5s)) {
    head_->signal(SIGKILL);
    wait_gone(head_, 5s);
  }
  head_.reset();
  step_.reset();
  // Only what this run made (owned_dir: checked by inode, no link followed).
  tls_dir_.remove();
  work_dir_.remove();
}

} // namespace hvactor::cluster
