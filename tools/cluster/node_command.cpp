// node_command: the hvactor-node command lines other programs build (the
// flags hvactor-node declares in node_cli.cpp).

#include "tools/cluster/node_options.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "base/internal/process.hpp"

namespace hvactor::cluster {

std::vector<std::string> tls_args(const tls::config& tls) {
  if (!tls.enabled())
    return {};
  return {"--tls-cert", tls.certificate, "--tls-key", tls.key, "--tls-ca", tls.cafile};
}

std::vector<std::string> node_command::argv() const {
  std::vector<std::string> a{binary};
  auto add = [&a](const char* flag, const std::string& value) {
    if (!value.empty())
      a.insert(a.end(), {flag, value});
  };
  auto add_int = [&a](const char* flag, const std::optional<int>& value) {
    if (value)
      a.insert(a.end(), {flag, std::to_string(*value)});
  };
  if (slurm)
    a.push_back("--slurm");
  if (head)
    a.push_back("--head");
  add("--address", address);
  if (exit_on_head_loss)
    a.push_back("--exit-on-head-loss");
  add_int("--port", port);
  add("--bind", bind);
  add("--node-ip", node_ip);
  add_int("--num-cpus", num_cpus);
  add_int("--num-gpus", num_gpus);
  add("--node-id", node_id);
  add("--work-dir", work_dir);
  add_int("--connect-timeout", connect_timeout_s);
  auto t = tls_args(tls);
  a.insert(a.end(), t.begin(), t.end());
  add("--tls-dir", tls_dir);
  if (insecure)
    a.push_back("--insecure");
  return a;
}

std::vector<std::string> status_argv(const std::string& binary, const std::string& address,
                                     const tls::config& tls) {
  std::vector<std::string> a{binary, "status", "--address", address};
  auto t = tls_args(tls);
  a.insert(a.end(), t.begin(), t.end());
  return a;
}

std::string node_binary() {
  if (const char* v = std::getenv("HVACTOR_NODE_BINARY"); v && *v)
    return v;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  // The tools of a build tree or an install sit beside hvactor-node.
  if (!ec) {
    auto beside = (exe.parent_path() / "hvactor-node").string();
    if (::access(beside.c_str(), X_OK) == 0)
      return beside;
  }
  return find_program("hvactor-node");
}

std::optional<std::string> listening_address(const std::string& line) {
  static const std::regex listening{R"(listening on (\S+):(\d+) )"};
  std::smatch m;
  if (!std::regex_search(line, m, listening))
    return std::nullopt;
  return m[1].str() + ":" + m[2].str();
}

bool joined_line(const std::string& line) {
  return line.rfind("hvactor-node: node '", 0) == 0 && line.find("' joined ") != std::string::npos;
}

} // namespace hvactor::cluster
