// hvactor-node --head / --address: one node (and on the head the registry)
// until SIGTERM or SIGINT.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/manager.hpp>
#include <fmt/format.h>

#include "hvactor/settings.hpp"

#include "actors/node/node_agent.hpp"
#include "actors/node/node_registry.hpp"
#include "base/net/transport.hpp"
#include "base/net/connection_watchdog.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "base/net/net.hpp"
#include "base/internal/owned_dir.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"
#include "actors/protocol/system_config.hpp"
#include "commands.hpp"
#include "tools/dashboard/server.hpp"

namespace hvactor::node_tool {

namespace {

using namespace std::chrono_literals;

// Fills in defaults and refuses an unsafe or inconsistent setup. A per-run
// work dir (o.run_work_dir_prefix) is made into `run_dir`.
void resolve(node_options& o, std::string& head_host, uint16_t& head_port, owned_dir& run_dir) {
  if (o.node_id.empty())
    o.node_id = net::host_name();
  hvactor::validate_node_id(o.node_id);
  if (o.work_dir.empty() && !o.run_work_dir_prefix.empty()) {
    run_dir = owned_dir::make(temp_root(),
                              {fmt::format("hvactor-{}", ::getuid()),
                               o.run_work_dir_prefix + ".XXXXXX"},
                              "the node's per-run work directory");
    o.work_dir = run_dir.path();
  }
  if (o.work_dir.empty())
    o.work_dir = fmt::format("/tmp/hvactor-{}/{}", ::getuid(), o.node_id);
  if (!o.head)
    std::tie(head_host, head_port) = net::parse_host_port(o.address, "--address");
  if (o.bind.empty())
    o.bind = o.head ? "127.0.0.1" : net::local_address_towards(head_host);
  if (o.node_ip.empty())
    o.node_ip = !net::is_wildcard(o.bind) ? o.bind
                : o.head                  ? net::host_name()
                                          : net::local_address_towards(head_host);
  if (!net::is_loopback(o.bind) && !o.tls.enabled() && !o.insecure)
    throw std::invalid_argument(fmt::format(
      "refusing to listen on {} without TLS: nodes run the programs drivers send them, so off "
      "loopback every connection must be mutual TLS. Pass --tls-cert, --tls-key and --tls-ca "
      "(`hvactor-node certs --dir DIR NAME...` makes them), or --insecure on a trusted network",
      o.bind));
  tls::validate(o.tls);
  if (!net::is_loopback(o.bind) && !o.tls.enabled())
    log::warn("listening on {} WITHOUT TLS (--insecure): anyone who reaches the port can run "
              "programs on this machine",
              o.bind);
  // Shipped binaries run from here: private to the node's user.
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec || ::chmod(o.work_dir.c_str(), 0700) != 0)
    throw error(fmt::format("cannot create the work dir {} with mode 0700: {}", o.work_dir,
                            ec ? ec.message() : std::strerror(errno)));
}

// The endpoints of one serving node: where it listens, and what the
// stop path reads.
struct endpoints {
  caf::actor_system& sys;
  const node_options& o;
  connection_watchdog* watchdog;
  std::string head_host;
  uint16_t head_port = 0;

  // Publishes `whom` on `port` of the bind address, watched when TLS.
  uint16_t publish(const caf::actor& whom, uint16_t port, const char* what) {
    auto got = transport::publish(sys, whom, port, o.bind);
    if (!got)
      throw error(fmt::format("cannot listen for the {} on {}:{}: {}{}", what, o.bind, port,
                              sys.render(got.error()),
                              port != 0 ? " (is the port taken? try another --port)" : ""));
    if (watchdog)
      watchdog->watch(*got);
    return *got;
  }
};

// The agent's join, again while --connect-timeout allows when the head
// dropped the connection during its handshake (CAF 0.17.6 counts a new
// connection as silent until the head's handshake arrives, and a heartbeat
// tick in between drops it: 1 node in 128 starting at once on 2 cores).
caf::expected<bool> join_head(endpoints& ep, caf::scoped_actor& self,
                              const proto::node_agent& agent, uint16_t agent_port) {
  auto deadline = deadline_after(std::chrono::steady_clock::now(),
                                 std::chrono::seconds(ep.o.connect_timeout_s));
  for (int attempt = 1;; ++attempt) {
    auto joined = ask<bool>(*self, agent, time_left(deadline), proto::join_atom_v, ep.head_host,
                            ep.head_port, agent_port);
    if (joined || joined.error() != caf::sec::connection_timeout
        || time_left(deadline) < knobs::rejoin_interval)
      return joined;
    log::debug("joining the head: attempt {} dropped during the handshake; trying again", attempt);
    std::this_thread::sleep_for(knobs::rejoin_interval / 4 * (1 + ::getpid() % 4));
  }
}

// Joins the agent to the head (its own registry on the head) and prints
// the ready line that hvactor-run, the benchmarks and users wait for.
void join(endpoints& ep, caf::scoped_actor& self, const proto::node_agent& agent,
          uint16_t registry_port) {
  auto& o = ep.o;
  auto agent_port = ep.publish(caf::actor_cast<caf::actor>(agent), o.head ? 0 : o.port,
                               "node agent");
  auto joined = join_head(ep, self, agent, agent_port);
  if (!joined)
    throw error(fmt::format("cannot join the head at {}:{} within {} s: {}{}", ep.head_host,
                            ep.head_port, o.connect_timeout_s, describe(joined.error()),
                            o.tls.enabled() ? " (does the head use the same cluster CA?)"
                                            : " (is it running? a TLS head refuses nodes "
                                              "without --tls-cert/--tls-key/--tls-ca)"));
  if (o.head)
    fmt::print("hvactor-node: head '{}' listening on {}:{} ({} CPUs, {} GPUs, {}); join with: "
               "hvactor-node --address {}:{}\n",
               o.node_id, o.node_ip, registry_port, o.num_cpus, o.gpu_ids.size(),
               o.tls.enabled() ? "mutual TLS" : "no TLS", o.node_ip, registry_port);
  else
    fmt::print("hvactor-node: node '{}' joined {}:{} and listens on {}:{} ({} CPUs, {} GPUs, "
               "{})\n",
               o.node_id, ep.head_host, ep.head_port, o.node_ip, agent_port, o.num_cpus,
               o.gpu_ids.size(), o.tls.enabled() ? "mutual TLS" : "no TLS");
  std::fflush(stdout);
}

// The head's dashboard (tools/dashboard/server.hpp), announced before the
// ready line. Ray's default port being taken (several heads on a machine)
// is a warning; a port or address the user chose must work.
std::unique_ptr<dashboard::server> start_dashboard(endpoints& ep,
                                                   const proto::node_registry& registry) {
  auto& o = ep.o;
  if (!o.head || !o.include_dashboard)
    return nullptr;
  dashboard::options d;
  d.host = o.dashboard_host;
  d.port = o.dashboard_port;
  d.token = o.dashboard_token;
  d.tls = o.tls;
  d.insecure = o.insecure;
  d.head_id = o.node_id;
  d.head_started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  std::unique_ptr<dashboard::server> server;
  try {
    server = std::make_unique<dashboard::server>(ep.sys, registry, d);
  } catch (const std::exception& e) {
    if (o.dashboard_port_given || !net::is_loopback(o.dashboard_host))
      throw;
    log::warn("{}; the head runs without its dashboard", e.what());
    return nullptr;
  }
  fmt::print("hvactor-node: dashboard at {}\n", server->url());
  std::fflush(stdout);
  return server;
}

// Sets *flag and SIGTERMs this process when `component` dies of anything
// but a shutdown: a node whose agent or registry died (an exception in a
// handler) must not keep listening as if it served.
void stop_when_dead(const caf::actor& component, std::shared_ptr<std::atomic<bool>> flag) {
  component->attach_functor([flag](const caf::error& reason) {
    if (reason == caf::exit_reason::user_shutdown || reason == caf::exit_reason::normal)
      return;
    *flag = true;
    ::kill(::getpid(), SIGTERM);
  });
}

// Serves until a stop signal, then stops the workers; the exit code.
int run(endpoints& ep, sigset_t& stop_signals, proto::node_registry& registry,
        proto::node_agent& agent) {
  auto& o = ep.o;
  uint16_t registry_port = 0;
  if (o.head) {
    registry = spawn_node_registry(ep.sys);
    registry_port = ep.publish(caf::actor_cast<caf::actor>(registry), o.port, "node registry");
    ep.head_host = o.node_ip;
    ep.head_port = registry_port;
  }
  node_agent_config node{o.node_id, net::host_name(), o.node_ip, o.num_cpus, o.gpu_ids};
  node.work_dir = o.work_dir;
  node.tls = o.tls;
  node.registry = registry;
  auto head_lost = std::make_shared<std::atomic<bool>>(false);
  if (o.exit_on_head_loss && !o.head)
    node.on_head_lost = [head_lost] {
      *head_lost = true;
      ::kill(::getpid(), SIGTERM);
    };
  auto board = start_dashboard(ep, registry);
  agent = spawn_node_agent(ep.sys, node);
  caf::scoped_actor self{ep.sys};
  join(ep, self, agent, registry_port);
  auto died = std::make_shared<std::atomic<bool>>(false);
  stop_when_dead(caf::actor_cast<caf::actor>(agent), died);
  if (registry)
    stop_when_dead(caf::actor_cast<caf::actor>(registry), died);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  int rc = 0;
  if (*died) {
    log::error("the node's agent or registry failed (see above); stopping the node");
    rc = 1;
  } else if (*head_lost) {
    log::info("the head went away (--exit-on-head-loss): stopping the node and its workers");
  } else {
    log::info("received {}: stopping the node and its workers", ::strsignal(sig));
  }
  if (auto stopped = ask<bool>(*self, agent, knobs::node_stop_timeout, proto::stop_atom_v);
      !stopped)
    log::warn("workers did not all stop in time: {}", describe(stopped.error()));
  return rc;
}

} // namespace

int serve(node_options o) {
  std::string head_host;
  uint16_t head_port = 0;
  // Declared first: removed last, after the workers that ran from it.
  owned_dir run_dir;
  resolve(o, head_host, head_port, run_dir);
  log::set_role(o.head ? "head" : "node " + o.node_id);
  // Every thread CAF starts inherits this mask, so only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  transport::guard_ports(o.tls, o.insecure);
  caf::actor_system_config cfg;
  configure_system(cfg, 0, o.tls);
  auto sys = std::make_unique<caf::actor_system>(cfg);
  if (o.tls.enabled() && !sys->openssl_manager().authentication_enabled()) {
    // CAF would silently fall back to anonymous TLS
    // (docs/development/platform-notes.md, "CAF TLS: anonymous fallback").
    log::error("TLS is configured but CAF's OpenSSL module is not authenticating; refusing");
    std::fflush(nullptr);
    run_dir.remove();
    std::_Exit(1);
  }
  std::unique_ptr<connection_watchdog> watchdog;
  if (o.tls.enabled())
    watchdog = std::make_unique<connection_watchdog>(connection_watchdog::options{});
  endpoints ep{*sys, o, watchdog.get(), head_host, head_port};
  proto::node_registry registry;
  proto::node_agent agent;
  int rc = 0;
  try {
    rc = run(ep, stop_signals, registry, agent);
  } catch (const std::exception& e) {
    log::error("{}", e.what());
    rc = 1;
  }
  if (agent)
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
  if (registry)
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
  agent = nullptr;
  registry = nullptr;
  watchdog.reset();
  destroy_bounded(sys, knobs::system_exit_limit);
  return rc;
}

} // namespace hvactor::node_tool
