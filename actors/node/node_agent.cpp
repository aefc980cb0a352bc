#include "actors/node/node_agent.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "actors/node/node_colocator.hpp"
#include "base/internal/binary_cache.hpp"
#include "base/net/transport.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_net.hpp"
#include "base/internal/caf_error.hpp"
#include "actors/node/node_ledger.hpp"

namespace hvactor {

namespace {

using namespace proto;
using namespace std::chrono_literals;

struct agent_state {
  node_agent_config cfg;
  /// CPUs, GPU ids and who holds them; the resource decisions live there.
  node_ledger ledger{{}, 0, {}};
  /// Who asked for each reservation (monitored: a driver that dies before
  /// colocating gets its reservation released), by job id.
  std::map<std::string, caf::actor_addr> requesters;
  std::map<caf::actor_addr, std::string> colocators; // -> job id
  std::optional<binary_cache> cache;
  /// Unfinished uploads by job id (their parts are dropped with the job).
  std::map<std::string, std::set<std::string>> uploads;
  // Membership.
  std::string head_host;
  uint16_t head_port = 0;
  uint16_t own_port = 0;
  node_registry registry;
  bool rejoining = false;
  // Node shutdown.
  bool stopping = false;
  std::vector<caf::typed_response_promise<bool>> stop_promises;
  static inline const char* name = "node_agent";

  int64_t started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  node_info info() const {
    node_info out;
    out.node_id = cfg.node_id;
    out.hostname = cfg.hostname;
    out.address = cfg.address;
    out.port = own_port;
    out.caches_binaries = cache.has_value();
    out.version = HVACTOR_VERSION;
    out.started_ms = started_ms;
    ledger.fill(out);
    return out;
  }
};

using agent_actor = node_agent::stateful_pointer<agent_state>;

caf::error agent_error(error_kind kind, std::string message) {
  return make_error(kind, std::move(message));
}

// The registry's view of this node follows every change of its resources.
void publish_info(agent_actor self) {
  if (self->state.registry)
    self->send(self->state.registry, update_atom_v, self->state.info());
}

void release(agent_actor self, const std::string& job) {
  auto& st = self->state;
  if (auto u = st.uploads.find(job); u != st.uploads.end()) {
    for (auto& hash : u->second)
      st.cache->abort(hash, job);
    st.uploads.erase(u);
  }
  st.requesters.erase(job);
  if (st.ledger.release(job))
    publish_info(self);
}

void finish_stop_if_done(agent_actor self) {
  auto& st = self->state;
  if (!st.stopping || !st.colocators.empty())
    return;
  for (auto& rp : st.stop_promises)
    rp.deliver(true);
  st.stop_promises.clear();
  self->quit();
}

// Connects to the head (or takes the registry beside us) and joins it.
void join(agent_actor self, std::chrono::milliseconds timeout,
          std::function<void(caf::error)> done) {
  auto& st = self->state;
  auto send_join = [=](node_registry reg) {
    self->request(reg, timeout, join_atom_v, self->state.info(), node_agent{self})
      .then(
        [=](bool) {
          self->state.registry = reg;
          self->monitor(reg);
          done({});
        },
        [=](caf::error& err) { done(err); });
  };
  if (st.cfg.registry) {
    send_join(st.cfg.registry);
    return;
  }
  self->request(transport::connector(self->system()), timeout, caf::connect_atom_v, st.head_host,
                st.head_port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
        if (!ptr) {
          done(agent_error(error_kind::generic, "no registry is published there"));
          return;
        }
        send_join(caf::actor_cast<node_registry>(std::move(ptr)));
      },
      [=](caf::error& err) { done(err); });
}

void rejoin(agent_actor self) {
  // Attempts start every rejoin_interval, each bounded by less than that: a
  // node resumed from SIGSTOP may first talk into the connection the head
  // already dropped, and must not wait out the full join timeout on it.
  auto started = std::chrono::steady_clock::now();
  join(self, knobs::rejoin_attempt_timeout, [=](caf::error err) {
    auto& st = self->state;
    if (!err) {
      log::info("node '{}' rejoined the head at {}:{}", st.cfg.node_id, st.head_host,
                st.head_port);
      st.rejoining = false;
      return;
    }
    log::debug("node '{}': rejoin attempt failed: {}", st.cfg.node_id, describe(err));
    if (st.stopping)
      return;
    auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
    self->delayed_send(self, std::max(std::chrono::milliseconds{0}, knobs::rejoin_interval - spent),
                       rejoin_atom_v);
  });
}

caf::result<bool> put_binary(agent_actor self, const std::string& hash, const std::string& job,
                             uint64_t offset, const std::vector<char>& bytes, bool last) {
  auto& st = self->state;
  if (!st.cache)
    return agent_error(error_kind::generic,
                       fmt::format("node '{}' has no binary cache", st.cfg.node_id));
  try {
    st.cache->write(hash, job, offset, bytes);
    st.uploads[job].insert(hash);
    if (last) {
      st.uploads[job].erase(hash);
      st.cache->finish(hash, job);
      log::info("cached binary {} ({} bytes) for job {}", hash.substr(0, 12),
                offset + bytes.size(), job);
    }
    return true;
  } catch (const std::exception& e) {
    st.cache->abort(hash, job);
    st.uploads[job].erase(hash);
    return agent_error(error_kind::generic,
                       fmt::format("node '{}' could not store the driver's binary: {}",
                                   st.cfg.node_id, e.what()));
  }
}

// The shipped program's libraries come first for its loader: before those of
// the job's own LD_LIBRARY_PATH, or else this node's.
void put_libraries_first(env_list& env, const std::string& dir) {
  for (auto& [name, value] : env.entries)
    if (name == "LD_LIBRARY_PATH") {
      value = value.empty() ? dir : dir + ":" + value;
      return;
    }
  const char* ours = std::getenv("LD_LIBRARY_PATH");
  env.entries.emplace_back("LD_LIBRARY_PATH",
                           ours && *ours ? dir + ":" + ours : dir);
}

caf::result<node_colocator> colocate(agent_actor self, spawn_request& req, coordinator coord) {
  auto& st = self->state;
  if (st.stopping)
    return agent_error(error_kind::worker_error,
                       fmt::format("node '{}' is shutting down", st.cfg.node_id));
  auto res = st.ledger.claimable(req.job_id);
  if (!res)
    return std::move(res.error());
  if (!req.binary_hash.empty()) {
    bool cached = false;
    try {
      cached = st.cache && st.cache->has(req.binary_hash);
    } catch (const std::exception& e) {
      return agent_error(error_kind::invalid_argument, e.what());
    }
    if (!cached)
      return agent_error(error_kind::worker_error,
                         fmt::format("node '{}' does not have binary {} in its cache",
                                     st.cfg.node_id, req.binary_hash));
    req.executable = st.cache->path(req.binary_hash);
  }
  if (!req.libraries.empty()) {
    try {
      if (!st.cache)
        throw error("it has no binary cache");
      put_libraries_first(req.env, st.cache->library_dir(req.libraries));
    } catch (const std::exception& e) {
      return agent_error(error_kind::worker_error,
                         fmt::format("node '{}' cannot provide the program's libraries: {}",
                                     st.cfg.node_id, e.what()));
    }
  }
  req.env.entries.emplace_back(env::node_address, st.cfg.address);
  for (auto& kv : tls::to_env(st.cfg.tls))
    req.env.entries.push_back(kv);
  auto job = req.job_id;
  auto coloc = spawn_node_colocator(self->system(), std::move(req), std::move(*res), coord,
                                    node_agent{self});
  self->monitor(coloc);
  st.ledger.claim(job);
  st.requesters.erase(job);
  st.colocators.emplace(coloc.address(), job);
  return coloc;
}

// A colocator, the head, or a driver that reserved here went away.
void on_down(agent_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  // A colocator that ended always gives its job's resources back.
  if (auto i = st.colocators.find(dm.source); i != st.colocators.end()) {
    auto job = i->second;
    st.colocators.erase(i);
    release(self, job);
    finish_stop_if_done(self);
    return;
  }
  if (st.registry && dm.source == st.registry.address()) {
    log::warn("node '{}' lost the head at {}:{} ({}); rejoining every {} s", st.cfg.node_id,
              st.head_host, st.head_port, caf::to_string(dm.reason),
              knobs::rejoin_interval.count());
    st.registry = nullptr;
    if (st.cfg.on_head_lost && !st.cfg.registry && !st.stopping) {
      st.cfg.on_head_lost();
      return;
    }
    if (!st.cfg.registry && !st.stopping && !st.rejoining) {
      st.rejoining = true;
      rejoin(self);
    }
    return;
  }
  // A driver that reserved here and went away before colocating.
  std::vector<std::string> orphaned;
  for (auto& [job, requester] : st.requesters)
    if (requester == dm.source)
      orphaned.push_back(job);
  for (auto& job : orphaned) {
    log::info("driver of job {} went away before starting workers: releasing", job);
    release(self, job);
  }
}

// Node shutdown: every colocator escalates to SIGKILL on its own; its down
// message (not this answer) is what completes the stop.
caf::result<bool> on_stop(agent_actor self) {
  auto& st = self->state;
  auto rp = self->make_response_promise<bool>();
  st.stop_promises.push_back(rp);
  if (!st.stopping) {
    st.stopping = true;
    for (auto& [addr, job] : st.colocators)
      if (auto coloc = caf::actor_cast<node_colocator>(addr))
        self->request(coloc, knobs::node_colocator_stop, stop_atom_v)
          .then([](bool) {}, [](caf::error&) {});
  }
  finish_stop_if_done(self);
  return rp;
}

node_agent::behavior_type agent_impl(agent_actor self, node_agent_config cfg,
                                     node_ledger ledger) {
  self->set_exception_handler(exit_with_error("node agent"));
  self->state.cfg = std::move(cfg);
  self->state.ledger = std::move(ledger);
  if (!self->state.cfg.work_dir.empty())
    self->state.cache.emplace(self->state.cfg.work_dir + "/bin");
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
  return {
    [=](info_atom) { return self->state.info(); },
    [=](reserve_atom, const std::string& job, const resources& want) -> caf::result<reservation> {
      auto& st = self->state;
      if (st.stopping)
        return agent_error(error_kind::placement_timeout,
                           fmt::format("node '{}' is shutting down", st.cfg.node_id));
      auto res = st.ledger.reserve(job, want);
      if (!res)
        return std::move(res.error());
      if (auto sender = self->current_sender()) {
        st.requesters[job] = caf::actor_cast<caf::actor_addr>(sender);
        self->monitor(caf::actor_cast<caf::actor>(sender));
      }
      publish_info(self);
      return std::move(*res);
    },
    [=](release_atom, const std::string& job) {
      // A colocated job's resources return when its colocator ends.
      if (self->state.ledger.claimable(job))
        release(self, job);
      return true;
    },
    [=](colocate_atom, spawn_request& req, coordinator coord) -> caf::result<node_colocator> {
      return colocate(self, req, coord);
    },
    [=](has_bin_atom, const std::string& hash, const std::string& local) -> caf::result<bool> {
      auto& st = self->state;
      try {
        return st.cache
               && (st.cache->has(hash) || st.cache->adopt(hash, local, knobs::adopt_max_bytes));
      } catch (const std::exception& e) {
        return agent_error(error_kind::invalid_argument, e.what());
      }
    },
    [=](put_bin_atom, const std::string& hash, const std::string& job, uint64_t offset,
        const std::vector<char>& bytes, bool last) {
      return put_binary(self, hash, job, offset, bytes, last);
    },
    [=](join_atom, const std::string& host, uint16_t port,
        uint16_t own_port) -> caf::result<bool> {
      auto& st = self->state;
      st.head_host = host;
      st.head_port = port;
      st.own_port = own_port;
      auto rp = self->make_response_promise<bool>();
      join(self, knobs::node_join_timeout, [=](caf::error err) mutable {
        if (err)
          rp.deliver(err);
        else
          rp.deliver(true);
      });
      return rp;
    },
    [=](stop_atom) { return on_stop(self); },
    [=](rejoin_atom) {
      if (!self->state.stopping)
        rejoin(self);
    },
  };
}

} // namespace

proto::node_agent spawn_node_agent(caf::actor_system& sys, node_agent_config cfg) {
  // Built here, not in the actor, so that a bad configuration throws at
  // the caller instead of killing the agent as it starts.
  node_ledger ledger{cfg.node_id, cfg.num_cpus, {cfg.gpu_ids.begin(), cfg.gpu_ids.end()}};
  return sys.spawn(agent_impl, std::move(cfg), std::move(ledger));
}

} // namespace hvactor
