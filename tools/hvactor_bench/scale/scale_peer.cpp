// hvactor-bench scale --peer mpi: Open MPI's job start across the emulated
// cluster's nodes (mpirun's daemons started in the nodes' namespaces by
// `hvactor-netcluster mpi-agent`, as hvactor-bench's other mpi peers are),
// timed to every rank's MPI_Init by hvactor-bench-scale-mpi.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include <fmt/format.h>

#include "base/internal/process.hpp"
#include "base/internal/start_marks.hpp"
#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/report.hpp"
#include "tools/hvactor_bench/scale/scale.hpp"

namespace hvactor::bench_tool {

namespace {

namespace marks = hvactor::detail::start_marks;

std::string program(const std::string& name) {
  try {
    return find_program(name);
  } catch (const std::exception&) {
    return {};
  }
}

/// mpirun's command line: `per_host` slots on each of `hosts`, TCP only
/// over the cluster's subnet, no binding (an emulated node is one core).
process_spec mpirun_spec(const std::vector<peer_host>& hosts, int per_host) {
  process_spec s;
  s.executable = program("mpirun");
  std::string list, subnet = hosts.front().address;
  subnet = subnet.substr(0, subnet.rfind('.')) + ".0/24";
  for (auto& h : hosts)
    list += (list.empty() ? "" : ",") + h.address + ":" + std::to_string(per_host);
  auto cluster = hosts.front().ns.substr(0, hosts.front().ns.rfind('-'));
  s.args = {s.executable, "--oversubscribe", "--bind-to", "none", "-np",
            std::to_string(hosts.size() * static_cast<size_t>(per_host)), "--host", list,
            "--mca", "plm_rsh_agent", program("hvactor-netcluster") + " mpi-agent " + cluster,
            "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", subnet, "--mca",
            "oob_tcp_if_include", subnet, helper_path("hvactor-bench-scale-mpi")};
  if (::geteuid() == 0)
    s.env = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  s.capture_stdout = true;
  s.echo_stderr = false;
  s.stderr_tail_lines = 5;
  return s;
}

/// "init_done_ns T0 T1 ..." -> the times; empty when absent.
std::vector<int64_t> init_times(const std::string& out) {
  std::istringstream lines{out};
  std::vector<int64_t> times;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words{line};
    std::string tag;
    if (!(words >> tag) || tag != "init_done_ns")
      continue;
    for (int64_t t; words >> t;)
      times.push_back(t);
  }
  return times;
}

} // namespace

std::string mpi_start_missing() {
  if (program("mpirun").empty())
    return "needs Open MPI's mpirun on PATH (Debian: apt-get install openmpi-bin)";
  if (helper_path("hvactor-bench-scale-mpi").empty())
    return "hvactor-bench-scale-mpi was not built (no MPI development files: Debian "
           "libopenmpi-dev)";
  if (std::getenv("HVACTOR_NETCLUSTER") == nullptr)
    return "runs across an emulated cluster's nodes: start hvactor-bench inside "
           "`hvactor-netcluster up -- ...`";
  return {};
}

mpi_round run_mpi_start(int hosts, int per_host, double limit_s) {
  mpi_round r;
  int64_t t0 = 0;
  try {
    auto all = netcluster_hosts();
    if (static_cast<int>(all.size()) < hosts)
      throw std::runtime_error(fmt::format("the cluster has {} nodes, the job wants {}",
                                           all.size(), hosts));
    all.resize(static_cast<size_t>(hosts));
    auto spec = mpirun_spec(all, per_host);
    t0 = marks::now_ns();
    auto res = run_command(std::move(spec), std::chrono::milliseconds{
                                              static_cast<int64_t>(limit_s * 1000)});
    r.exit_ms = static_cast<double>(marks::now_ns() - t0) / 1e6;
    auto times = init_times(res.out);
    if (res.timed_out || res.exit.exit_code != 0 || times.size() != all.size() * per_host) {
      std::string tail;
      for (auto& l : res.exit.stderr_tail)
        tail += (tail.empty() ? "" : " | ") + l;
      r.error = fmt::format("mpirun {} after {:.0f} ms ({} of {} ranks reported){}{}",
                            res.timed_out ? "ran past its limit"
                                          : describe_exit(res.exit.exit_code, res.exit.signal),
                            r.exit_ms, times.size(), all.size() * per_host,
                            tail.empty() ? "" : ": ", tail);
      return r;
    }
    std::vector<double> ms;
    for (auto t : times)
      ms.push_back(static_cast<double>(t - t0) / 1e6);
    r.total_ms = quantile(ms, 1.0);
    r.median_ms = quantile(ms, 0.5);
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = e.what();
    if (t0 > 0)
      r.exit_ms = static_cast<double>(marks::now_ns() - t0) / 1e6;
  }
  return r;
}

} // namespace hvactor::bench_tool
