// hvactor-node inside a Slurm step: the node's identity and resources from
// the step's environment (docs/development/platform-notes.md, "Slurm:
// hvactor-node inside a step"). Every choice is printed with
// its source, so that a wrong one is visible in the step's output.

#include "tools/cluster/slurm_step.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/settings.hpp"
#include "base/net/net.hpp"
#include "base/internal/owned_dir.hpp"
#include "tools/cluster/slurm_env.hpp"
#include "tools/cluster/tls_layout.hpp"

namespace hvactor::cluster {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int positive(const char* name, const char* value) {
  char* end = nullptr;
  long n = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || n < 0 || n > 1 << 20)
    throw std::invalid_argument(fmt::format("--slurm: {}={} is not a CPU count", name, value));
  return static_cast<int>(n);
}

} // namespace

bool in_slurm_step() {
  return env("SLURM_STEP_ID") && env("SLURMD_NODENAME");
}

void apply_slurm_defaults(node_options& o, const slurm_explicit& given,
                          const std::string& tls_dir) {
  std::vector<std::string> said;
  if (!given.node_id) {
    const char* name = env("SLURMD_NODENAME");
    if (name == nullptr)
      throw std::invalid_argument("--slurm: SLURMD_NODENAME is not set; run hvactor-node inside "
                                  "an srun step, or give --node-id");
    o.node_id = name;
    hvactor::validate_node_id(o.node_id);
    said.push_back(fmt::format("node id {} (SLURMD_NODENAME)", o.node_id));
  }
  if (!given.cpus) {
    for (const char* name : {"SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"})
      if (const char* v = env(name)) {
        o.num_cpus = positive(name, v);
        said.push_back(fmt::format("{} CPUs ({})", o.num_cpus, name));
        break;
      }
  }
  if (!given.gpus) {
    // The GPUs Slurm gave this step; the CUDA runtime might see others'.
    o.gpu_ids.clear();
    if (const char* v = env("CUDA_VISIBLE_DEVICES")) {
      try {
        o.gpu_ids = hvactor::parse_gpu_ids(v);
      } catch (const std::invalid_argument&) {
        // UUIDs or MIG names: offer them by position.
        int n = 1;
        for (const char* c = v; *c; ++c)
          n += *c == ',';
        for (int i = 0; i < n; ++i)
          o.gpu_ids.push_back(i);
      }
      said.push_back(fmt::format("GPUs {} (CUDA_VISIBLE_DEVICES)", v));
    } else {
      said.push_back("no GPU (CUDA_VISIBLE_DEVICES unset)");
    }
  }
  if (!given.work_dir) {
    // The job id and the node id name a directory: both are checked.
    const char* job = env("SLURM_JOB_ID");
    if (job != nullptr)
      slurm::validate_job_id(job, "SLURM_JOB_ID");
    auto id = o.node_id.empty() ? net::host_name() : o.node_id;
    hvactor::validate_node_id(id);
    o.run_work_dir_prefix = fmt::format("slurm-{}-{}", job ? job : "0", id);
    said.push_back(fmt::format("work dir {}/hvactor-{}/{}.XXXXXX (new, removed at exit)",
                               temp_root(), ::getuid(), o.run_work_dir_prefix));
  }
  if (!tls_dir.empty() && !given.tls) {
    auto id = o.node_id.empty() ? net::host_name() : o.node_id;
    hvactor::validate_node_id(id); // names the certificate's files
    auto cafile = o.tls.cafile;
    tls_layout dir{tls_dir};
    o.tls = dir.identity(id);
    if (!cafile.empty())
      o.tls.cafile = cafile;
    said.push_back(fmt::format("TLS identity {}", dir.certificate(id)));
  }
  if (!said.empty())
    fmt::print(stderr, "hvactor-node: {}\n", fmt::join(said, ", "));
}

} // namespace hvactor::cluster
