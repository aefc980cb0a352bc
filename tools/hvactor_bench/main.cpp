// hvactor-bench: measures an hvactor cluster (the embedded one, --address
// HEAD:PORT, or a Slurm allocation, brought up by hvactor-run).
//
//   hvactor-bench allreduce|allgather|broadcast [-np N | --num-hosts H --per-host K]
//                 [-b 4] [-e 64M] [-f 4] [--iters 20] [-w 5] [--check]
//                 [--backend auto|shm|gloo|hierarchical] [--device cpu|gpu]
//                 [--peer mpi,gloo,torch] [--json FILE] [--csv FILE] [--plot FILE.svg]
//   hvactor-bench train [--model resnet50|mlp] [--batch-size 32] [--num-iters 10]
//                 [--num-batches-per-iter 10] [--fp16-allreduce] [--scaling 1,2,4] ...
//   hvactor-bench control-plane [--workers 1,4] ...
//   hvactor-bench scale [--num-hosts H --per-host K] [--rounds 3] [--idle-seconds 10]
//                 [--peer mpi] [--json FILE]   (start() to hvd::init(), by phase)
//
// Prints nccl-tests' columns; --json/--csv keep every sample and the
// machine's description.

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "tools/hvactor_bench/control_plane.hpp"
#include "tools/cluster/slurm_env.hpp"
#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/peers/peer_session.hpp"
#include "tools/hvactor_bench/scale/scale.hpp"
#include "tools/hvactor_bench/sweep/sweep.hpp"

namespace {

/// Inside a Slurm allocation, without --address or HVACTOR_ADDRESS and
/// unless --launcher local (removed from `args` here): runs `hvactor-run --driver -- hvactor-bench ARGS`
/// (the hvactor-run next to this program), which brings a cluster up on the
/// allocation's nodes, runs this program against it and tears it down; the
/// nested run sees HVACTOR_ADDRESS and measures. Returns when this process
/// should measure itself.
void reexec_in_slurm(std::vector<std::string>& args) {
  // A worker process of this program (the runtime serves it) never starts
  // a cluster.
  if (std::getenv("HVACTOR_WORKER_COORDINATOR") != nullptr)
    return;
  bool address = std::getenv("HVACTOR_ADDRESS") != nullptr;
  std::string launcher = "auto";
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& a = args[i];
    if (a == "--address" || a.rfind("--address=", 0) == 0)
      address = true;
    if (a == "--launcher") {
      if (i + 1 == args.size())
        throw std::invalid_argument("--launcher needs a value (auto, local or slurm)");
      launcher = args[++i];
    } else if (a.rfind("--launcher=", 0) == 0) {
      launcher = a.substr(11);
    } else {
      rest.push_back(a);
    }
  }
  args = rest;
  if (launcher != "auto" && launcher != "local" && launcher != "slurm")
    throw std::invalid_argument("--launcher must be auto, local or slurm (got '" + launcher + "')");
  if (launcher == "local" || std::getenv("HVACTOR_BENCH_SLURM") != nullptr)
    return;
  auto alloc = hvactor::slurm::allocation_from_env();
  if (!alloc) {
    if (launcher == "slurm")
      throw std::invalid_argument("--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID "
                                  "is not set; run it under salloc or sbatch)");
    return;
  }
  if (address) {
    if (launcher == "slurm")
      throw std::invalid_argument("--launcher slurm starts its own cluster: drop --address");
    return;
  }
  auto dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  auto run = (dir / "hvactor-run").string();
  if (::access(run.c_str(), X_OK) != 0)
    throw std::runtime_error("inside a Slurm allocation hvactor-bench starts its cluster through "
                             "hvactor-run, which is not next to it (" + run + ")");
  std::vector<std::string> words{run, "--driver", "--", (dir / "hvactor-bench").string()};
  words.insert(words.end(), args.begin() + 1, args.end());
  std::vector<char*> exec_argv;
  for (auto& w : words)
    exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  ::setenv("HVACTOR_BENCH_SLURM", "1", 1);
  fmt::print("# Slurm job {}: {} node(s); cluster through hvactor-run --driver\n", alloc->job_id,
             alloc->nodes.size());
  std::fflush(stdout);
  ::execv(exec_argv[0], exec_argv.data());
  throw std::runtime_error(fmt::format("cannot run {}: {}", run, std::strerror(errno)));
}

/// `train` is its own program (hvactor-bench-train, next to this one or in
/// libexec/hvactor): it links LibTorch, whose libraries would slow every
/// other subcommand's worker start by most of a second.
[[noreturn]] void exec_train(std::vector<std::string>& words) {
  auto train = hvactor::bench_tool::helper_path("hvactor-bench-train");
  if (train.empty())
    throw std::invalid_argument("train: this hvactor-bench was built without LibTorch "
                                "(hvactor-bench-train is not installed; Debian: apt-get install "
                                "libtorch-dev, then rebuild)");
  std::vector<char*> exec_argv;
  for (auto& w : words)
    exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  ::execv(train.c_str(), exec_argv.data());
  throw std::runtime_error(fmt::format("cannot run {}: {}", train, std::strerror(errno)));
}

} // namespace

int main(int argc, char** argv) {
  // A peer's process, started by run_peer() as the leader of a session of
  // its own (peer_session.hpp): setsid, then exec.
  if (argc > 1 && std::string{argv[1]} == "__peer-session")
    return hvactor::bench_tool::exec_in_session(argc, argv);
  return hvactor::bench_tool::exit_code_of([&] {
    // One rank of the SPMD path, under hvactor-run (started by run_peer()).
    if (argc > 1 && std::string{argv[1]} == "__peer-spmd")
      return hvactor::bench_tool::run_spmd_peer(argc, argv);
    // One rank of the raw Gloo peer (started by run_peer()).
    if (argc > 1 && std::string{argv[1]} == "__peer-gloo")
      return hvactor::bench_tool::run_gloo_peer(argc, argv);
#ifdef HVACTOR_BENCH_CUDA
    // The raw NCCL peer (--device gpu --peer nccl).
    if (argc > 1 && std::string{argv[1]} == "__peer-nccl")
      return hvactor::bench_tool::run_nccl_peer(argc, argv);
#endif
    // The echo actor of control-plane --peer caf.
    if (argc > 1 && std::string{argv[1]} == "__peer-caf")
      hvactor::bench_tool::serve_caf_echo();
    std::vector<std::string> words(argv, argv + argc);
    reexec_in_slurm(words);
    if (words.size() > 1 && words[1] == "train")
      exec_train(words);
    std::vector<char*> rt_argv;
    for (auto& w : words)
      rt_argv.push_back(w.data());
    rt_argv.push_back(nullptr);
    // In a worker process this never returns. The embedded node offers 64
    // CPU slots, so that any -np runs on a small machine.
    hvactor::runtime rt{static_cast<int>(words.size()), rt_argv.data(), {.num_cpus = 64}};
    auto args = rt.args();
    if (args.size() > 1 && args[1] == "control-plane")
      return hvactor::bench_tool::run_control_plane(rt, args);
    if (args.size() > 1 && args[1] == "scale")
      return hvactor::bench_tool::run_scale(rt, args);
    return hvactor::bench_tool::run_sweep(rt, args);
  });
}
