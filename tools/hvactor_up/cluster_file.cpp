#include "cluster_file.hpp"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "yaml_file.hpp"

#include "hvactor/settings.hpp"

namespace hvactor::up_tool {

namespace {

/// A cluster file is a page of YAML; a bound on what one makes us read.
constexpr uintmax_t max_cluster_file_bytes = 1 << 20;

struct reader : tool::yaml_reader {
  std::vector<std::string> commands(const YAML::Node& n, const std::string& key) const {
    if (n && !n.IsSequence())
      fail(key, "must be a list of commands");
    return texts(n, key);
  }

  machine entry(const YAML::Node& n, const std::string& key, int ssh_port) const {
    machine m;
    m.ssh_port = ssh_port;
    if (n.IsScalar()) {
      m.ip = n.as<std::string>();
    } else {
      only(n, key, {"ip", "node_id", "num_cpus", "num_gpus", "ssh_port"});
      if (!n["ip"])
        fail(key + ".ip", "is required");
      m.ip = text(n["ip"], key + ".ip");
      if (n["node_id"])
        m.node_id = text(n["node_id"], key + ".node_id");
      if (n["num_cpus"])
        m.num_cpus = number(n["num_cpus"], key + ".num_cpus", 0, 1 << 20);
      if (n["num_gpus"])
        m.num_gpus = number(n["num_gpus"], key + ".num_gpus", 0, 1024);
      if (n["ssh_port"])
        m.ssh_port = number(n["ssh_port"], key + ".ssh_port", 1, 65535);
    }
    if (m.ip.empty() || m.ip.find_first_of(" \t\n'\"`$;&|<>") != std::string::npos)
      fail(key, fmt::format("'{}' is not an address", m.ip));
    return m;
  }
};


std::string home_path(std::string p) {
  if (p.rfind("~/", 0) == 0)
    if (const char* home = std::getenv("HOME"))
      p = std::string{home} + p.substr(1);
  return p;
}

// auth: the ssh user (a user name, never an option), the key; returns the
// ssh port every machine defaults to.
int read_auth(const reader& r, const YAML::Node& doc, cluster_file& c) {
  auto auth = doc["auth"];
  if (!auth)
    r.fail("auth", "is required (ssh_user, ssh_private_key)");
  r.only(auth, "auth", {"ssh_user", "ssh_private_key", "ssh_port"});
  if (!auth["ssh_user"])
    r.fail("auth.ssh_user", "is required");
  c.ssh_user = r.text(auth["ssh_user"], "auth.ssh_user");
  // It goes before "@host" in ssh's argv: a leading '-' would be read as an
  // option (-oProxyCommand=... runs a command here), so only a user name.
  bool user_ok = !c.ssh_user.empty() && c.ssh_user.size() <= 64 && c.ssh_user.front() != '-';
  for (unsigned char ch : c.ssh_user)
    user_ok = user_ok && (std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-' || ch == '$');
  if (!user_ok)
    r.fail("auth.ssh_user", fmt::format("'{}' is not a user name (letters, digits, . _ - $; "
                                        "not starting with '-')",
                                        c.ssh_user));
  if (auth["ssh_private_key"])
    c.ssh_key = home_path(r.text(auth["ssh_private_key"], "auth.ssh_private_key"));
  return auth["ssh_port"] ? r.number(auth["ssh_port"], "auth.ssh_port", 1, 65535) : 22;
}

// provider: the head and the workers, with distinct, valid node ids.
void read_provider(const reader& r, const YAML::Node& doc, cluster_file& c, int ssh_port) {
  auto provider = doc["provider"];
  if (!provider)
    r.fail("provider", "is required (type: local, head_ip, worker_ips)");
  r.only(provider, "provider", {"type", "head_ip", "worker_ips"});
  if (provider["type"] && r.text(provider["type"], "provider.type") != "local")
    r.fail("provider.type", "only 'local' (machines you already have) is supported");
  if (!provider["head_ip"])
    r.fail("provider.head_ip", "is required");
  c.head = r.entry(provider["head_ip"], "provider.head_ip", ssh_port);
  c.head.head = true;
  if (c.head.node_id.empty())
    c.head.node_id = "head";
  if (auto workers = provider["worker_ips"]) {
    if (!workers.IsSequence())
      r.fail("provider.worker_ips", "must be a list");
    for (size_t i = 0; i < workers.size(); ++i) {
      auto m = r.entry(workers[i], fmt::format("provider.worker_ips[{}]", i), ssh_port);
      if (m.node_id.empty())
        m.node_id = m.ip;
      c.workers.push_back(m);
    }
  }
  std::set<std::string> ids;
  for (auto& m : c.machines()) {
    try {
      hvactor::validate_node_id(m.node_id);
    } catch (const std::invalid_argument& e) {
      r.fail("node_id", e.what());
    }
    if (m.node_id == "driver")
      r.fail("node_id", "'driver' is reserved (the driver's certificate)");
    if (!ids.insert(m.node_id).second)
      r.fail("provider", fmt::format("node id '{}' is used twice; give workers on one machine "
                                     "distinct node_id values",
                                     m.node_id));
  }
}

// hvactor: port, node_binary, tls, timeout.
void read_hvactor(const reader& r, const YAML::Node& doc, cluster_file& c) {
  if (auto h = doc["hvactor"]) {
    r.only(h, "hvactor", {"port", "node_binary", "tls", "timeout"});
    if (h["port"])
      c.port = r.number(h["port"], "hvactor.port", 1, 65535);
    if (h["node_binary"])
      c.node_binary = r.text(h["node_binary"], "hvactor.node_binary");
    if (h["tls"]) {
      try {
        c.tls = h["tls"].as<bool>();
      } catch (const YAML::Exception&) {
        r.fail("hvactor.tls", "must be true or false");
      }
    }
    if (h["timeout"])
      c.timeout_s = r.number(h["timeout"], "hvactor.timeout", 1, 3600);
  }
}

cluster_file read_cluster(const std::string& path, const YAML::Node& doc) {
  reader r{{path}};
  r.only(doc, "", {"cluster_name", "provider", "auth", "setup_commands", "head_setup_commands",
                   "worker_setup_commands", "hvactor"});
  cluster_file c;
  if (!doc["cluster_name"])
    r.fail("cluster_name", "is required");
  c.name = r.text(doc["cluster_name"], "cluster_name");
  try {
    hvactor::validate_node_id(c.name);
  } catch (const std::invalid_argument& e) {
    r.fail("cluster_name", e.what());
  }
  int ssh_port = read_auth(r, doc, c);
  read_provider(r, doc, c, ssh_port);
  c.setup_commands = r.commands(doc["setup_commands"], "setup_commands");
  c.head_setup_commands = r.commands(doc["head_setup_commands"], "head_setup_commands");
  c.worker_setup_commands = r.commands(doc["worker_setup_commands"], "worker_setup_commands");
  read_hvactor(r, doc, c);
  return c;
}

} // namespace

std::vector<machine> cluster_file::machines() const {
  std::vector<machine> out{head};
  out.insert(out.end(), workers.begin(), workers.end());
  return out;
}

cluster_file read_cluster_file(const std::string& path) {
  auto doc = tool::load_yaml_file(path, "the cluster file", max_cluster_file_bytes);
  try {
    return read_cluster(path, doc);
  } catch (const YAML::Exception& e) {
    // A shape the readers above did not foresee: still the file's error.
    throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
}

} // namespace hvactor::up_tool
