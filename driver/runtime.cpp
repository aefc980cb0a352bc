#include "hvactor/runtime.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "actors/node/horovod_worker.hpp"
#include "actors/node/node_agent.hpp"
#include "actors/node/node_registry.hpp"
#include "collectives/backends/devices.hpp"
#include "base/net/transport.hpp"
#include "base/internal/file_digest.hpp"
#include "base/internal/program_libraries.hpp"
#include "base/net/net.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/log.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"
#include "actors/protocol/system_config.hpp"
#include "base/internal/process_system.hpp"
#include "driver/internal/runtime_impl.hpp"
#include "driver/internal/runtime_access.hpp"
#include "base/internal/ask.hpp"
#include "base/internal/caf_error.hpp"

namespace hvactor {

namespace {

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    throw error("cannot resolve /proc/self/exe: workers need the driver's binary");
  return std::string(buf, static_cast<size_t>(n));
}


// hvactor's own runtime flags, each named once: the scan below picks them
// out of the program's arguments by this table, and cxxopts parses what it
// picked by the same table.
struct runtime_flag {
  const char* name;
  const char* help;
  /// Takes a value (--name=V or --name V); else a switch.
  bool valued;
  /// Its value is an integer (parsed as one, so that "--num-cpus x" fails).
  bool integer;
  void (*apply)(runtime_options&, const cxxopts::ParseResult&);
};

template <class T>
T value_of(const cxxopts::ParseResult& r, const char* name) {
  return r[name].as<T>();
}

const runtime_flag runtime_flags[] = {
  {"address", "cluster to join (HOST:PORT)", true, false,
   [](runtime_options& o, auto& r) { o.address = value_of<std::string>(r, "address"); }},
  {"num-cpus", "CPUs the embedded node offers", true, true,
   [](runtime_options& o, auto& r) { o.num_cpus = value_of<int>(r, "num-cpus"); }},
  {"num-gpus", "GPUs the embedded node offers", true, true,
   [](runtime_options& o, auto& r) { o.num_gpus = value_of<int>(r, "num-gpus"); }},
  {"gpu-ids", "GPU ids the embedded node offers (comma-separated)", true, false,
   [](runtime_options& o, auto& r) {
     o.gpu_ids = parse_gpu_ids(value_of<std::string>(r, "gpu-ids"));
   }},
  {"node-id", "id of the embedded node", true, false,
   [](runtime_options& o, auto& r) { o.node_id = value_of<std::string>(r, "node-id"); }},
  {"bind", "address the driver publishes on when joining a cluster", true, false,
   [](runtime_options& o, auto& r) { o.bind = value_of<std::string>(r, "bind"); }},
  {"tls-cert", "this driver's certificate (PEM)", true, false,
   [](runtime_options& o, auto& r) { o.tls.certificate = value_of<std::string>(r, "tls-cert"); }},
  {"tls-key", "this driver's private key (PEM)", true, false,
   [](runtime_options& o, auto& r) { o.tls.key = value_of<std::string>(r, "tls-key"); }},
  {"tls-ca", "the cluster CA (PEM)", true, false,
   [](runtime_options& o, auto& r) { o.tls.cafile = value_of<std::string>(r, "tls-ca"); }},
  {"insecure", "join a non-loopback cluster without TLS", false, false,
   [](runtime_options& o, auto&) { o.insecure = true; }},
};

const runtime_flag* find_flag(const std::string& name) {
  for (auto& f : runtime_flags)
    if (name == f.name)
      return &f;
  return nullptr;
}

// Splits argv into hvactor's own flags (with argv[0] first) and the
// program's arguments, verbatim and in order.
std::vector<std::string> take_own_flags(int argc, char** argv, std::vector<std::string>& rest) {
  std::vector<std::string> ours{argc > 0 ? argv[0] : "hvactor"};
  rest.clear();
  if (argc > 0)
    rest.emplace_back(argv[0]);
  bool options_ended = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_ended || arg.rfind("--", 0) != 0) {
      rest.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      rest.push_back(arg);
      continue;
    }
    auto eq = arg.find('=');
    auto* flag = find_flag(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
    if (flag == nullptr) {
      rest.push_back(arg);
      continue;
    }
    ours.push_back(arg);
    if (flag->valued && eq == std::string::npos && i + 1 < argc)
      ours.emplace_back(argv[++i]);
  }
  return ours;
}

// Consumes hvactor's own options; everything else stays for the program
// (cxxopts sees only ours, so that the program's arguments, "-0.5" or
// "-1000" among them, are never taken for options).
void parse_args(int argc, char** argv, runtime_options& opts, std::vector<std::string>& rest) {
  auto ours = take_own_flags(argc, argv, rest);
  std::vector<char*> own_argv;
  for (auto& a : ours)
    own_argv.push_back(a.data());
  cxxopts::Options parser{ours[0], "hvactor runtime options"};
  auto add = parser.add_options();
  for (auto& f : runtime_flags) {
    if (f.integer)
      add(f.name, f.help, cxxopts::value<int>());
    else if (f.valued)
      add(f.name, f.help, cxxopts::value<std::string>());
    else
      add(f.name, f.help);
  }
  try {
    auto result = parser.parse(static_cast<int>(own_argv.size()), own_argv.data());
    for (auto& f : runtime_flags)
      if (result.count(f.name))
        f.apply(opts, result);
  } catch (const cxxopts::exceptions::exception& e) {
    throw std::invalid_argument(std::string{"hvactor::runtime: "} + e.what());
  }
  if (opts.num_cpus < 0)
    throw std::invalid_argument("--num-cpus must be >= 0: Got " + std::to_string(opts.num_cpus)
                                + ".");
}

// No --address: one node with this machine's resources, loopback only.
// The driver's system is its process's system (process_system.hpp); a
// second runtime in one process keeps its own.
void lend_system(runtime::impl& st) {
  try {
    st.lent_system = process_system::lend(*st.sys);
  } catch (const std::logic_error&) {
    log::debug("another runtime's system is this process's system already");
  }
}

void start_embedded(runtime::impl& st) {
  if (st.opts.num_cpus == 0)
    st.opts.num_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (st.opts.gpu_ids.empty() && st.opts.num_gpus < 0) {
    // Neither --num-gpus nor --gpu-ids: offer what the CUDA runtime sees.
    auto probe = collectives::probe_devices();
    st.opts.num_gpus = probe.count;
    if (probe.count == 0)
      log::debug("embedded cluster offers no GPU: {}", probe.reason);
  }
  if (st.opts.gpu_ids.empty() && st.opts.num_gpus > 0)
    for (int i = 0; i < st.opts.num_gpus; ++i)
      st.opts.gpu_ids.push_back(i);
  st.opts.num_gpus = static_cast<int>(st.opts.gpu_ids.size());
  if (st.opts.node_id.empty())
    st.opts.node_id = net::host_name();
  validate_node_id(st.opts.node_id);
  transport::guard_ports({}, st.opts.insecure);
  st.cfg = std::make_unique<caf::actor_system_config>();
  configure_system(*st.cfg);
  st.sys = std::make_unique<caf::actor_system>(*st.cfg);
  lend_system(st);
  st.local_registry = spawn_node_registry(*st.sys);
  node_agent_config node{st.opts.node_id, net::host_name(), st.bind_host, st.opts.num_cpus,
                         st.opts.gpu_ids};
  node.registry = st.local_registry;
  st.local_agent = spawn_node_agent(*st.sys, node);
  st.registry = st.local_registry;
  auto joined = ask<bool>(*st.sys, st.local_agent, knobs::join_timeout, proto::join_atom_v,
                          std::string{}, uint16_t{0}, uint16_t{0});
  if (!joined)
    throw error("the embedded cluster did not start: " + describe(joined.error()));
  log::debug("embedded cluster: node '{}' with {} CPUs and {} GPUs", st.opts.node_id,
             st.opts.num_cpus, st.opts.num_gpus);
}

// A joined cluster's registry proxy dies with its connection (the head
// stopped or restarted): remember it so that the next job reconnects.
void watch_registry(runtime::impl& st) {
  st.registry_lost->store(false);
  auto lost = st.registry_lost;
  st.registry->attach_functor([lost](const caf::error&) { lost->store(true); });
}

// --address HEAD:PORT: connect to the head's registry; jobs run on its nodes.
void join_cluster(runtime::impl& st) {
  auto [host, port] = net::parse_host_port(st.opts.address, "--address (or HVACTOR_ADDRESS)");
  if (!net::is_loopback(host) && !st.opts.tls.enabled() && !st.opts.insecure)
    throw std::invalid_argument(
      "hvactor::runtime: the cluster at " + st.opts.address
      + " is not on loopback, so the driver needs a TLS identity: pass --tls-cert, --tls-key "
        "and --tls-ca (or set HVACTOR_TLS_CERT/KEY/CA; `hvactor-node certs` makes them), or "
        "--insecure to join without authentication");
  tls::validate(st.opts.tls);
  st.bind_host = !st.opts.bind.empty() ? st.opts.bind : net::local_address_towards(host);
  st.binary_hash = sha256_file(st.executable);
  // Listing and hashing the libraries (tens of MB) overlaps the connect.
  auto libraries = std::async(std::launch::async, program_libraries, st.executable);
  transport::guard_ports(st.opts.tls, st.opts.insecure);
  st.cfg = std::make_unique<caf::actor_system_config>();
  configure_system(*st.cfg, 0, st.opts.tls);
  st.sys = std::make_unique<caf::actor_system>(*st.cfg);
  lend_system(st);
  if (st.opts.tls.enabled())
    st.watchdog = std::make_unique<connection_watchdog>(connection_watchdog::options{});
  auto found = transport::connect(*st.sys, host, port, knobs::join_timeout);
  st.libraries = libraries.get();
  if (!found) {
    auto why = st.sys->render(found.error());
    st.lent_system.reset();
    st.sys.reset();
    throw error(fmt::format(
      "hvactor::runtime: cannot join the cluster at {}: {}. Is `hvactor-node --head` running "
      "there{}?",
      st.opts.address, why,
      st.opts.tls.enabled() ? ", with certificates from the same CA as this driver's"
                            : " (a TLS cluster refuses a driver without --tls-cert/key/ca)"));
  }
  st.registry = caf::actor_cast<proto::node_registry>(std::move(*found));
  watch_registry(st);
  auto view = ask<proto::cluster_view>(*st.sys, st.registry, knobs::join_timeout,
                                       proto::list_atom_v);
  if (!view) {
    auto why = describe(view.error());
    st.registry = nullptr;
    st.lent_system.reset();
    st.sys.reset();
    throw error(fmt::format("hvactor::runtime: {} does not answer as an hvactor head: {}",
                            st.opts.address, why));
  }
  log::debug("joined the cluster at {}: {} nodes; publishing on {}", st.opts.address,
             view->nodes.size(), st.bind_host);
}

} // namespace

proto::node_registry runtime::impl::registry_for_job(std::chrono::milliseconds bound) {
  if (local_registry || !registry_lost->load())
    return registry;
  // The head went away: a restarted head is back on the same port, as its
  // nodes find it (they rejoin every second).
  auto [host, port] = net::parse_host_port(opts.address, "--address");
  auto deadline = deadline_after(std::chrono::steady_clock::now(), bound);
  std::string why = "no attempt";
  for (;;) {
    auto left = time_left(deadline);
    auto found = transport::connect(*sys, host, port, std::min<std::chrono::milliseconds>(left, knobs::join_timeout));
    if (found) {
      registry = caf::actor_cast<proto::node_registry>(std::move(*found));
      log::info("reconnected to the head at {}", opts.address);
      watch_registry(*this);
      return registry;
    }
    why = describe(found.error());
    if (time_left(deadline) <= knobs::rejoin_interval)
      break;
    std::this_thread::sleep_for(knobs::rejoin_interval);
  }
  throw placement_timeout(fmt::format("the head at {} is unreachable (its connection dropped and "
                                      "reconnecting failed within {} ms: {})",
                                      opts.address, bound.count(), why));
}

proto::cluster_view runtime_access::cluster(runtime& rt, std::chrono::milliseconds bound) {
  auto& st = *rt.impl_;
  auto reg = st.registry_for_job(bound);
  auto view = ask<proto::cluster_view>(*st.sys, reg, bound, proto::list_atom_v);
  if (!view)
    throw_caf_error(view.error(), "the cluster's node registry");
  return std::move(*view);
}

proto::node_registry runtime::impl::driver_registry() {
  if (local_registry)
    return local_registry;
  std::lock_guard<std::mutex> guard{driver_mu};
  if (driver_registry_)
    return driver_registry_;
  // A cluster of its own beside the joined one: one node with this
  // machine's CPUs, reached on the driver's address, with the driver's TLS
  // identity handed to its workers.
  driver_registry_ = spawn_node_registry(*sys);
  node_agent_config node{net::host_name(), net::host_name(), bind_host, driver_cpus(), {}};
  node.tls = opts.tls;
  node.registry = driver_registry_;
  driver_agent_ = spawn_node_agent(*sys, node);
  auto joined = ask<bool>(*sys, driver_agent_, knobs::join_timeout, proto::join_atom_v,
                          std::string{}, uint16_t{0}, uint16_t{0});
  if (!joined) {
    caf::anon_send_exit(driver_agent_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(driver_registry_, caf::exit_reason::user_shutdown);
    driver_agent_ = nullptr;
    driver_registry_ = nullptr;
    throw error("the driver's own node did not start: " + describe(joined.error()));
  }
  return driver_registry_;
}

int runtime::impl::driver_cpus() {
  if (local_registry)
    return opts.num_cpus;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

runtime::runtime(int argc, char** argv, runtime_options defaults) : impl_(new impl) {
  if (is_worker_process())
    serve_worker(); // never returns
  auto& st = *impl_;
  st.opts = std::move(defaults);
  for (int i = 0; i < argc; ++i)
    st.original_args.emplace_back(argv[i]);
  parse_args(argc, argv, st.opts, st.args);
  if (st.opts.address.empty())
    st.opts.address = env::get(env::address).value_or("");
  if (!st.opts.tls.enabled())
    st.opts.tls = tls::from_env();
  st.executable = self_executable();
  if (st.opts.address.empty())
    start_embedded(st);
  else
    join_cluster(st);
}

runtime::~runtime() {
  if (!impl_ || !impl_->sys)
    return;
  if (impl_->local_agent)
    caf::anon_send_exit(impl_->local_agent, caf::exit_reason::user_shutdown);
  if (impl_->local_registry)
    caf::anon_send_exit(impl_->local_registry, caf::exit_reason::user_shutdown);
  if (impl_->driver_agent_)
    caf::anon_send_exit(impl_->driver_agent_, caf::exit_reason::user_shutdown);
  if (impl_->driver_registry_)
    caf::anon_send_exit(impl_->driver_registry_, caf::exit_reason::user_shutdown);
  impl_->driver_agent_ = nullptr;
  impl_->driver_registry_ = nullptr;
  impl_->local_agent = nullptr;
  impl_->local_registry = nullptr;
  impl_->registry = nullptr;
  impl_->watchdog.reset();
  impl_->lent_system.reset();
  destroy_bounded(impl_->sys, knobs::system_exit_limit);
}

const std::vector<std::string>& runtime::args() const noexcept {
  return impl_->args;
}

const runtime_options& runtime::options() const noexcept {
  return impl_->opts;
}

} // namespace hvactor
