#include "remote.hpp"

#include <signal.h>

#include <filesystem>
#include <future>

#include <fmt/format.h>

#include "base/internal/process.hpp"

namespace hvactor::up_tool {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

remote::remote(const cluster_file& c, std::string known_hosts)
  : c_(c), known_hosts_(std::move(known_hosts)) {
}

std::vector<std::string> remote::common_options(const machine& m, const char* port_flag) const {
  std::vector<std::string> o{port_flag,
                             std::to_string(m.ssh_port),
                             "-o", "BatchMode=yes",
                             "-o", "StrictHostKeyChecking=accept-new",
                             "-o", "UserKnownHostsFile=" + known_hosts_,
                             "-o", fmt::format("ConnectTimeout={}", std::min(c_.timeout_s, 10)),
                             "-o", "ServerAliveInterval=5",
                             "-o", "LogLevel=ERROR"};
  if (!c_.ssh_key.empty())
    o.insert(o.end(), {"-i", c_.ssh_key, "-o", "IdentitiesOnly=yes"});
  return o;
}

remote_result remote::start(std::vector<std::string> argv) const {
  process_spec spec;
  spec.executable = find_program(argv.front());
  spec.args = std::move(argv);
  spec.capture_stdout = true;
  spec.echo_stderr = false;
  spec.stderr_tail_lines = 8;
  auto out = std::make_shared<std::string>();
  spec.on_line = [out](int stream, const std::string& line) {
    if (stream == 1 && out->size() < (1 << 20))
      *out += line + "\n";
  };
  std::promise<process_exit> done;
  auto ended = done.get_future();
  auto child = child_process::start(spec, [&done](process_exit ex) { done.set_value(std::move(ex)); });
  remote_result r;
  if (ended.wait_for(std::chrono::seconds(c_.timeout_s)) != std::future_status::ready) {
    child->signal(SIGKILL);
    ended.wait();
    r.err = fmt::format("no answer within {} s", c_.timeout_s);
    return r;
  }
  auto ex = ended.get();
  r.ok = ex.exit_code == 0;
  r.out = *out;
  r.err = fmt::format("{}", fmt::join(ex.stderr_tail, " | "));
  if (!r.ok && r.err.empty())
    r.err = describe_exit(ex.exit_code, ex.signal);
  return r;
}

remote_result remote::run(const machine& m, const std::string& command) const {
  std::vector<std::string> argv{"ssh"};
  auto o = common_options(m, "-p");
  argv.insert(argv.end(), o.begin(), o.end());
  argv.insert(argv.end(), {fmt::format("{}@{}", c_.ssh_user, m.ip), command});
  return start(std::move(argv));
}

remote_result remote::copy(const machine& m, const std::vector<std::string>& files,
                           const std::string& dir) const {
  // Through ssh's stdin (`cat > file`), not scp: no SFTP subsystem needed,
  // and a key never appears on a command line.
  for (auto& file : files) {
    auto name = std::filesystem::path(file).filename().string();
    auto target = dir + "/" + name;
    std::vector<std::string> argv{"sh", "-c", "f=$1; shift; exec \"$@\" < \"$f\"", "sh", file,
                                  "ssh"};
    auto o = common_options(m, "-p");
    argv.insert(argv.end(), o.begin(), o.end());
    argv.insert(argv.end(), {fmt::format("{}@{}", c_.ssh_user, m.ip),
                             fmt::format("umask 077 && cat > {0}.tmp && mv {0}.tmp {0}",
                                         shell_quote(target))});
    auto r = start(std::move(argv));
    if (!r.ok)
      return r;
  }
  return {true, "", ""};
}

} // namespace hvactor::up_tool
