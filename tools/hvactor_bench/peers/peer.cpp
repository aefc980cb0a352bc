#include "tools/hvactor_bench/peers/peer.hpp"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "base/internal/process.hpp"
#include "tools/hvactor_bench/load.hpp"
#include "tools/hvactor_bench/peers/peer_session.hpp"

namespace hvactor::bench_tool {

namespace fs = std::filesystem;

namespace {

fs::path self_dir() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path{"."} : exe.parent_path();
}

// This program (it starts each peer process in a session: __peer-session).
std::string self_exe() {
  std::error_code ec;
  auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? (self_dir() / "hvactor-bench").string() : exe.string();
}

std::string helper(const std::string& file) {
  return helper_path(file);
}

std::string python() {
  const char* v = std::getenv("HVACTOR_BENCH_PYTHON");
  std::string name = v && *v ? v : "/usr/bin/python3";
  try {
    return find_program(name); // "python3" through PATH, as a shell would
  } catch (const std::exception&) {
    return name; // reported by peer_missing
  }
}

std::string netcluster_tool() {
  try {
    return find_program("hvactor-netcluster");
  } catch (const std::exception&) {
    return {};
  }
}

std::string mpirun() {
  try {
    return find_program("mpirun");
  } catch (const std::exception&) {
    return {};
  }
}

// The SPMD path's job: hvactor-run over hvactor-bench __peer-spmd.
process_spec spmd_process(const peer_request& req, const std::vector<std::string>& method) {
  process_spec s;
  s.executable = (self_dir() / "hvactor-run").string();
  s.args = {s.executable};
  s.args.insert(s.args.end(), req.launcher_args.begin(), req.launcher_args.end());
  s.args.insert(s.args.end(), {"--", (self_dir() / "hvactor-bench").string(), "__peer-spmd"});
  s.args.insert(s.args.end(), method.begin(), method.end());
  return s;
}

// The peer's processes for one job: hvactor-run (spmd), mpirun over hvactor-bench-mpi, or one
// process per rank (raw Gloo, torch.distributed) meeting in `store`.
std::vector<process_spec> peer_processes(const peer_request& req, const fs::path& store) {
  std::string sizes, iters, warmup;
  for (auto& s : req.sizes) {
    auto sep = sizes.empty() ? "" : ",";
    sizes += sep + std::to_string(s.bytes);
    iters += sep + std::to_string(s.iters);
    warmup += sep + std::to_string(s.warmup);
  }
  std::vector<std::string> method{"--kind",  req.kind, "--sizes",  sizes,
                                  "--iters", iters,    "--warmup", warmup};
  if (req.check)
    method.push_back("--check");
  std::vector<process_spec> specs;
  if (req.name == "spmd") {
    specs.push_back(spmd_process(req, method));
  } else if (req.name == "mpi") {
    process_spec s;
    s.executable = mpirun();
    bool bind = req.bind && req.ranks <= busy_load::usable_cores();
    s.args = {s.executable,  "--oversubscribe", "--bind-to", bind ? "core" : "none", "-np",
              std::to_string(req.ranks)};
    if (!req.hosts.empty()) {
      // Slots by node, filled in order (rank r on node r / per_host, as
      // hvactor's ranks); TCP between nodes only over the cluster's subnet.
      std::string hosts, subnet = req.hosts.front().address;
      subnet = subnet.substr(0, subnet.rfind('.')) + ".0/24";
      for (auto& h : req.hosts)
        hosts += (hosts.empty() ? "" : ",") + h.address + ":" + std::to_string(req.per_host);
      std::string cluster = req.hosts.front().ns.substr(0, req.hosts.front().ns.rfind('-'));
      s.args.insert(s.args.end(),
                    {"--host", hosts, "--mca", "plm_rsh_agent",
                     netcluster_tool() + " mpi-agent " + cluster, "--mca", "btl", "self,vader,tcp",
                     "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet});
    }
    s.args.push_back(helper("hvactor-bench-mpi"));
    s.args.insert(s.args.end(), method.begin(), method.end());
    if (::geteuid() == 0)
      s.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
    specs.push_back(std::move(s));
  } else {
    for (int r = 0; r < req.ranks; ++r) {
      process_spec s;
      if (req.name == "nccl") {
        // One process drives every GPU (ncclCommInitAll).
        s.executable = (self_dir() / "hvactor-bench").string();
        s.args = {s.executable, "__peer-nccl"};
        s.args.insert(s.args.end(), method.begin(), method.end());
        s.args.insert(s.args.end(), {"--size", std::to_string(req.ranks)});
        specs.push_back(std::move(s));
        break;
      }
      if (req.name == "gloo" && !req.hosts.empty()) {
        // In its node's namespace (`ip netns exec` execs the rank itself, so
        // the signals below reach it), bound to the node's address.
        auto& h = req.hosts.at(static_cast<size_t>(r / std::max(1, req.per_host)));
        s.executable = find_program("ip");
        s.args = {s.executable, "netns", "exec", h.ns, (self_dir() / "hvactor-bench").string(),
                  "__peer-gloo", "--ip", h.address};
      } else if (req.name == "gloo") {
        s.executable = (self_dir() / "hvactor-bench").string();
        s.args = {s.executable, "__peer-gloo"};
      } else {
        s.executable = python();
        s.args = {s.executable, helper("hvactor-bench-torch.py")};
      }
      s.args.insert(s.args.end(), method.begin(), method.end());
      if (req.name == "gloo")
        s.env = {{"HVACTOR_GLOO_ALLREDUCE", req.gloo_algorithm}};
      s.args.insert(s.args.end(), {"--rank", std::to_string(r), "--size", std::to_string(req.ranks),
                                   "--store", req.name == "torch" ? (store / "file").string() : store.string()});
      specs.push_back(std::move(s));
    }
  }
  return specs;
}

/// What the peer's processes reported.
struct peer_outcome {
  bool in_time = false;
  std::vector<std::string> points, failures;
};

// Runs `specs` to the end, each in a session of its own (peer_session.hpp;
// stopped past `limit`: SIGTERM to every process of the sessions, SIGKILL
// 5 s later), collecting rank 0's "point" line and every failure.
peer_outcome run_processes(peer_job& job, std::vector<process_spec> specs,
                           std::chrono::seconds limit) {
  struct shared {
    std::mutex mtx;
    std::condition_variable cv;
    size_t exited = 0;
    std::vector<std::string> points, failures;
  };
  auto st = std::make_shared<shared>();
  std::vector<std::shared_ptr<child_process>> children;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& s = specs[i];
    s.echo_stderr = false;
    s.capture_stdout = true;
    s.on_line = [st](int stream, const std::string& text) {
      // hvactor-run tags every line of a rank: "[1,0]<stdout>:point ...".
      auto tag = text.rfind("[1,", 0) == 0 ? text.find("]<stdout>:") : std::string::npos;
      auto line = tag == std::string::npos ? text : text.substr(tag + 10);
      if (stream == 1 && line.rfind("point ", 0) == 0) {
        std::lock_guard<std::mutex> guard{st->mtx};
        st->points.push_back(line);
      }
    };
    children.push_back(job.start(self_exe(), s, [st, i](process_exit ex) {
      std::lock_guard<std::mutex> guard{st->mtx};
      if (ex.exit_code != 0) {
        std::string tail;
        for (auto& l : ex.stderr_tail)
          tail += "\n  " + l;
        st->failures.push_back(fmt::format("process {} ended with {}{}", i,
                                           describe_exit(ex.exit_code, ex.signal), tail));
      }
      ++st->exited;
      st->cv.notify_all();
    }));
  }
  std::unique_lock<std::mutex> lock{st->mtx};
  bool done = st->cv.wait_for(lock, limit, [&] { return st->exited == children.size(); });
  if (!done) {
    lock.unlock();
    // mpirun stops its ranks on SIGTERM; SIGKILL whatever is left 5 s later.
    if (!job.signal(SIGTERM, std::chrono::seconds(5)))
      job.signal(SIGKILL, std::chrono::seconds(5));
    lock.lock();
    st->cv.wait_for(lock, std::chrono::seconds(5), [&] { return st->exited == children.size(); });
  }
  return {done, st->points, st->failures};
}

} // namespace

std::string helper_path(const std::string& file) {
  for (auto p : {self_dir() / file, self_dir() / ".." / "libexec" / "hvactor" / file})
    if (::access(p.c_str(), R_OK) == 0)
      return fs::weakly_canonical(p).string();
  return {};
}

std::vector<peer_host> netcluster_hosts() {
  const char* name = std::getenv("HVACTOR_NETCLUSTER");
  if (name == nullptr || *name == '\0')
    return {};
  auto tool = netcluster_tool();
  if (tool.empty())
    throw std::invalid_argument(fmt::format("HVACTOR_NETCLUSTER={}: hvactor-netcluster is not on "
                                            "PATH to list the cluster's nodes",
                                            name));
  process_spec spec;
  spec.executable = tool;
  spec.args = {tool, "hosts", name};
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  auto r = run_command(spec, std::chrono::seconds(30));
  if (r.timed_out || r.exit.exit_code != 0)
    throw std::invalid_argument(fmt::format("hvactor-netcluster hosts {} failed: {}", name,
                                            fmt::join(r.exit.stderr_tail, " | ")));
  std::vector<peer_host> out;
  std::istringstream in{r.out};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words{line};
    peer_host h;
    if (words >> h.node >> h.ns >> h.address && h.node != "head")
      out.push_back(h);
  }
  return out;
}

std::string peer_missing(const std::string& name) {
  if (name == "gloo")
    return {};
  if (name == "spmd") {
    if (::access((self_dir() / "hvactor-run").c_str(), X_OK) != 0)
      return "--peer spmd runs its ranks through hvactor-run, which is not next to hvactor-bench "
             "(" + (self_dir() / "hvactor-run").string() + "); --path executor measures without it";
    return {};
  }
  if (name == "nccl") {
#ifdef HVACTOR_BENCH_CUDA
    return {};
#else
    return "--peer nccl: this hvactor-bench was built without CUDA/NCCL";
#endif
  }
  if (name == "mpi") {
    if (mpirun().empty())
      return "--peer mpi needs Open MPI's mpirun on PATH (Debian: apt-get install openmpi-bin "
             "libopenmpi-dev; scripts/setup.sh installs them)";
    if (helper("hvactor-bench-mpi").empty())
      return "--peer mpi: this hvactor-bench was built without its MPI peer (hvactor-bench-mpi; "
             "build with Open MPI's development files, libopenmpi-dev)";
    return {};
  }
  if (name == "torch") {
    if (helper("hvactor-bench-torch.py").empty())
      return "--peer torch: hvactor-bench-torch.py is missing next to hvactor-bench and in "
             "libexec/hvactor";
    // argv, no shell: HVACTOR_BENCH_PYTHON is a path, never a command line.
    process_spec probe;
    probe.executable = python();
    probe.args = {probe.executable, "-c",
                  "import torch.distributed as d; assert d.is_gloo_available()"};
    probe.capture_stdout = true;
    probe.echo_stderr = false;
    bool ok = false;
    try {
      auto r = run_command(probe, std::chrono::seconds(60));
      ok = !r.timed_out && r.exit.exit_code == 0;
    } catch (const std::exception&) {
      // Not executable: reported below.
    }
    if (!ok)
      return fmt::format("--peer torch needs torch.distributed with gloo in {} (Debian: apt-get "
                         "install python3-torch; HVACTOR_BENCH_PYTHON picks another python)",
                         python());
    return {};
  }
  return "--peer " + name + ": not a peer (spmd, mpi, gloo, torch, nccl)";
}

std::vector<peer_point> run_peer(const peer_request& req) {
  // A fresh rendezvous directory per job (no state carries over), private
  // to this user (mkdtemp: 0700), so no other local user joins the mesh;
  // removed with the job, also when SIGINT or SIGTERM ends hvactor-bench.
  peer_outcome outcome;
  {
    peer_job job{"--peer " + req.name, "hvactor-bench-peer"};
    outcome = run_processes(job, peer_processes(req, job.folder()), req.limit);
  }
  if (!outcome.in_time)
    throw std::runtime_error(fmt::format("--peer {}: its {} job ran past {} s and was stopped "
                                         "after {} of {} sizes",
                                         req.name, req.kind, req.limit.count(),
                                         outcome.points.size(), req.sizes.size()));
  if (!outcome.failures.empty() || outcome.points.size() != req.sizes.size())
    throw std::runtime_error(fmt::format(
      "--peer {}: its {} job failed after {} of {} sizes: {}", req.name, req.kind,
      outcome.points.size(), req.sizes.size(),
      outcome.failures.empty() ? "it printed no result for the rest" : outcome.failures.front()));
  std::vector<peer_point> out;
  for (size_t i = 0; i < outcome.points.size(); ++i) {
    std::istringstream in{outcome.points[i].substr(6)};
    peer_point p;
    in >> p.bytes >> p.time_us >> p.wrong;
    for (double s; in >> s;)
      p.samples_us.push_back(s);
    if (!in.eof() || p.bytes != req.sizes[i].bytes)
      throw std::runtime_error(fmt::format("--peer {}: unreadable result line for {} B: {}",
                                           req.name, req.sizes[i].bytes,
                                           outcome.points[i].substr(0, 120)));
    out.push_back(std::move(p));
  }
  return out;
}

} // namespace hvactor::bench_tool
