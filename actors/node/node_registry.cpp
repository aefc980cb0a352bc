#include "actors/node/node_registry.hpp"

#include "hvactor/settings.hpp"

#include <chrono>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "hvactor/errors.hpp"
#include "base/internal/actor_system.hpp"
#include "base/internal/log.hpp"
#include "base/internal/caf_error.hpp"
#include "base/internal/knobs_net.hpp"
#include "actors/board/job_board.hpp"

namespace hvactor {

namespace {

using namespace proto;
using namespace std::chrono_literals;

struct member {
  node_info info;
  node_agent agent;
};

struct registry_state {
  /// In join order.
  std::vector<member> members;
  /// node id -> index into `members` (updates arrive once per reservation,
  /// so lookups must not scan: 10,000 nodes are placed in one go).
  std::unordered_map<std::string, size_t> index;
  /// The dashboard's jobs and runs; the drivers (coordinators) that sent
  /// jobs, monitored, by a number of theirs.
  job_board board;
  std::map<caf::actor_addr, uint64_t> drivers;
  uint64_t next_driver = 0;
  static inline const char* name = "node_registry";

  member* find(const std::string& node_id) {
    auto i = index.find(node_id);
    return i == index.end() ? nullptr : &members[i->second];
  }

  void add(member m) {
    index.emplace(m.info.node_id, members.size());
    members.push_back(std::move(m));
  }

  void erase(size_t pos) {
    members.erase(members.begin() + static_cast<std::ptrdiff_t>(pos));
    index.clear();
    for (size_t i = 0; i < members.size(); ++i)
      index.emplace(members[i].info.node_id, i);
  }
};

using registry_actor = node_registry::stateful_pointer<registry_state>;

void admit(registry_actor self, node_info info, node_agent agent) {
  auto& st = self->state;
  self->monitor(agent);
  if (auto* m = st.find(info.node_id)) {
    log::info("node '{}' rejoined the cluster from {}:{}", info.node_id, info.address, info.port);
    *m = member{std::move(info), agent};
    return;
  }
  log::info("node '{}' joined the cluster from {}:{} ({} CPUs, {} GPUs)", info.node_id,
            info.address, info.port, info.total.cpus, info.total.gpus);
  st.add(member{std::move(info), agent});
}

// A coordinator's view of its job; the coordinator is monitored from its
// first view on, so that its jobs turn lost if it goes away before they end.
void take_job(registry_actor self, job_view view) {
  auto& st = self->state;
  auto sender = self->current_sender();
  if (!sender)
    return;
  auto [d, fresh] = st.drivers.emplace(sender->address(), 0);
  if (fresh) {
    d->second = ++st.next_driver;
    self->monitor(sender);
  }
  st.board.update(std::move(view), d->second);
}

node_registry::behavior_type registry_impl(registry_actor self) {
  self->set_exception_handler(exit_with_error("node registry"));
  self->set_down_handler([=](caf::down_msg& dm) {
    if (auto d = self->state.drivers.find(dm.source); d != self->state.drivers.end()) {
      auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
      if (self->state.board.driver_lost(d->second, now.count()))
        log::warn("a driver went away before its job ended ({})", caf::to_string(dm.reason));
      self->state.drivers.erase(d);
      return;
    }
    auto& ms = self->state.members;
    for (size_t pos = 0; pos < ms.size(); ++pos)
      if (auto* i = &ms[pos]; i->agent.address() == dm.source) {
        if (dm.reason == caf::exit_reason::user_shutdown || !dm.reason)
          log::info("node '{}' left the cluster (shut down)", i->info.node_id);
        else
          log::warn("node '{}' left the cluster ({})", i->info.node_id,
                    caf::to_string(dm.reason));
        self->state.erase(pos);
        return;
      }
  });
  return {
    [=](join_atom, node_info& info, node_agent agent) -> caf::result<bool> {
      try {
        hvactor::validate_node_id(info.node_id);
      } catch (const std::invalid_argument& e) {
        return make_error(error_kind::invalid_argument, e.what());
      }
      auto* old = self->state.find(info.node_id);
      if (old == nullptr || old->agent == agent) {
        admit(self, std::move(info), agent);
        return true;
      }
      // Same id, another agent: a restarted node (the old one is gone but
      // not yet noticed) or a second live node under one id.
      auto rp = self->make_response_promise<bool>();
      auto previous = old->agent;
      self->request(previous, knobs::liveness_probe, info_atom_v)
        .then(
          [=](const node_info& alive) mutable {
            rp.deliver(make_error(error_kind::invalid_argument,
                                  fmt::format("node id '{}' is already in the cluster (a live "
                                              "node at {}:{}); give this node another --node-id",
                                              alive.node_id, alive.address, alive.port)));
          },
          [=](caf::error&) mutable {
            admit(self, info, agent);
            rp.deliver(true);
          });
      return rp;
    },
    [=](update_atom, node_info& info) {
      if (auto* m = self->state.find(info.node_id);
          m != nullptr && self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(m->agent))
        m->info = std::move(info);
    },
    [=](job_view_atom, job_view& view) { take_job(self, std::move(view)); },
    [=](job_end_atom, job_view& view) {
      take_job(self, std::move(view));
      return true;
    },
    [=](train_point_atom, train_point& point) { self->state.board.report(std::move(point)); },
    [=](board_atom) { return self->state.board.snapshot(); },
    [=](list_atom) {
      cluster_view view;
      view.nodes.reserve(self->state.members.size());
      view.agents.reserve(self->state.members.size());
      for (auto& m : self->state.members) {
        view.nodes.push_back(m.info);
        view.agents.push_back(m.agent);
      }
      return view;
    },
  };
}

} // namespace

proto::node_registry spawn_node_registry(caf::actor_system& sys) {
  return sys.spawn(registry_impl);
}

} // namespace hvactor
