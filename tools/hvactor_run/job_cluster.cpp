#include "job_cluster.hpp"

#include <pwd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "commands.hpp"
#include "hvactor/errors.hpp"
#include "tools/cluster/node_options.hpp"

namespace hvactor::run_tool {

namespace {

// A port free on this machine for the head (the first host is usually this
// one, as with horovodrun's launcher).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    ::close(fd);
  if (port == 0)
    throw error("hvactor-run -H: no free port for the cluster's head on this machine");
  return port;
}

std::string user_name() {
  if (auto* pw = ::getpwuid(::getuid()))
    return pw->pw_name;
  throw error("hvactor-run -H: this user has no name to log in with over ssh");
}

// A node id for `host`: its letters, digits, '.', '_' and '-'.
std::string node_id_of(const std::string& host) {
  std::string id;
  for (unsigned char c : host)
    id += std::isalnum(c) || c == '.' || c == '_' || c == '-' ? static_cast<char>(c) : '-';
  return id;
}

} // namespace

job_cluster::job_cluster(const std::vector<std::pair<std::string, int>>& hosts, int ssh_port,
                         const std::string& ssh_identity, int timeout_s) {
  c_.name = fmt::format("hvactor-run-{}", ::getpid());
  c_.ssh_user = user_name();
  c_.ssh_key = ssh_identity;
  c_.port = free_port();
  c_.node_binary = cluster::node_binary();
  c_.timeout_s = timeout_s;
  for (size_t i = 0; i < hosts.size(); ++i) {
    up_tool::machine m;
    m.ip = hosts[i].first;
    m.node_id = node_id_of(hosts[i].first);
    m.num_cpus = hosts[i].second;
    m.ssh_port = ssh_port;
    m.head = i == 0;
    (i == 0 ? c_.head : c_.workers.emplace_back()) = m;
  }
  up_tool::set_message_prefix("hvactor-run");
  if (up_tool::up(c_, false) != 0) {
    up_tool::down(c_, true);
    throw error(fmt::format("hvactor-run -H: the job's nodes did not all come up on {} (see the "
                            "lines above); nothing was left running",
                            hosts.size() == 1 ? hosts[0].first : fmt::format("{} hosts", hosts.size())));
  }
}

job_cluster::~job_cluster() {
  up_tool::down(c_, true);
}

std::chrono::milliseconds job_cluster::teardown_bound() const {
  return static_cast<long>(c_.machines().size()) * up_tool::stop_bound(c_);
}

std::string job_cluster::address() const {
  return up_tool::head_address(c_);
}

tls::config job_cluster::driver_tls() const {
  return up_tool::driver_tls(c_);
}

} // namespace hvactor::run_tool
