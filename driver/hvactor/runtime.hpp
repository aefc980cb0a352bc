#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hvactor/settings.hpp"

namespace hvactor {

class executor;

/// The process's hvactor runtime; create it first thing in `main`.
///
/// In a process that a node started as a worker, the constructor serves the
/// worker and ends the process when the job ends: it never returns there.
/// Otherwise, without `--address` (or HVACTOR_ADDRESS) it starts an
/// embedded local cluster: one node offering this machine's CPUs (and GPUs),
/// reachable on 127.0.0.1 only.
///
/// With `--address HEAD:PORT` it joins the cluster of `hvactor-node`s
/// behind that head (throws hvactor::error naming the address when the head
/// cannot be reached or refuses the connection), publishes each job's
/// coordinator on `--bind` (default: the local address that reaches the
/// head), and hashes its own binary so nodes can cache it.
///
/// Options it owns (removed from `args()`): `--address HOST:PORT`,
/// `--num-cpus N`, `--num-gpus N`, `--gpu-ids 0,1`, `--node-id ID` (embedded
/// cluster); `--bind ADDR`, `--tls-cert F`, `--tls-key F`, `--tls-ca F`
/// (or HVACTOR_TLS_CERT/KEY/CA), `--insecure` (joining a cluster). A head
/// off loopback needs the TLS identity, or `--insecure`.
class runtime {
public:
  runtime(int argc, char** argv, runtime_options defaults = {});
  ~runtime();

  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  /// argv without the options hvactor consumed (argv[0] first).
  const std::vector<std::string>& args() const noexcept;

  /// What this runtime offers or joins.
  const runtime_options& options() const noexcept;

  struct impl;

private:
  friend class executor;
  friend class launcher;
  friend class horovod_runner;
  friend struct runtime_access;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor
