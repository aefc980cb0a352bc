#pragma once

// Commands on the cluster's machines over ssh (and files over scp), each
// bounded by a timeout, never asking for a password or a host key
// confirmation (BatchMode; host keys learnt on first contact into the
// cluster's own known_hosts file).

#include <chrono>
#include <string>
#include <vector>

#include "cluster_file.hpp"

namespace hvactor::up_tool {

/// How a remote command ended.
struct remote_result {
  bool ok = false;
  /// Its stdout, and the last lines of its stderr (ssh's own errors too).
  std::string out;
  std::string err;
};

class remote {
public:
  /// `known_hosts`: the file ssh keeps the machines' host keys in.
  remote(const cluster_file& c, std::string known_hosts);

  /// Runs `command` (a shell command line) on `m` as the cluster's user.
  remote_result run(const machine& m, const std::string& command) const;

  /// Copies local `files` into `dir` (relative to the remote home), mode
  /// 0600, each through ssh's stdin.
  remote_result copy(const machine& m, const std::vector<std::string>& files,
                     const std::string& dir) const;

private:
  std::vector<std::string> common_options(const machine& m, const char* port_flag) const;
  remote_result start(std::vector<std::string> argv) const;

  const cluster_file& c_;
  std::string known_hosts_;
};

/// `s` quoted for a POSIX shell.
std::string shell_quote(const std::string& s);

} // namespace hvactor::up_tool
