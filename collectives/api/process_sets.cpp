// Horovod's process sets. Each set a rank belongs to is a job of its own
// among the set's members: its own engine (negotiation, fusion, thread),
// its own Gloo context under the job's rendezvous scope ("<prefix>/ps.<id>")
// and, where several members share a node, a shared-memory segment of its
// own (the members' first local rank creates it; the others open it
// through /proc/<pid>/fd, which the kernel allows a process of the same
// user only). Adding and removing are collectives over every rank of the
// job, decided alike on every rank before anything changes
// (process_set_agreement.hpp), so every rank numbers the sets alike.
#include "hvactor/hvd_process_set.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "base/internal/log.hpp"
#include "collectives/backends/device_setup.hpp"
#include "collectives/backends/host_backend.hpp"
#include "collectives/api/hvd_calls.hpp"
#include "collectives/api/hvd_options.hpp"
#include "collectives/engine/process_set_agreement.hpp"
#include "collectives/backends/shm/segment.hpp"
#include "collectives/elastic/elastic_session.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::hvd {

struct process_set_access {
  static void set_id(process_set& ps, int id) {
    ps.id_ = id;
  }
};

namespace {

using collectives::topology;

// A set this rank knows of; `engine` only where it is a member.
struct set_entry {
  std::vector<int> ranks;
  std::shared_ptr<detail::engine> engine;
  // The set's store client: Gloo's blame and the device setup keep using it.
  std::unique_ptr<collectives::rendezvous_client> store;
};

struct registry {
  // Serializes init/add/remove (collectives over the job, which may take
  // a while) without blocking the calls on other sets, which take `mu`.
  std::mutex admin;
  std::mutex mu;
  std::map<int, std::shared_ptr<set_entry>> sets;
  int next_id = 1;
  bool dynamic = false;
};

registry& sets() {
  static auto* r = new registry; // never destroyed, as hvd's state
  return *r;
}

thread_local int current_set = 0;

std::string describe(int id, const std::vector<int>& ranks) {
  return fmt::format("process set {} (ranks {})", id, fmt::join(ranks, ", "));
}

// What identifies this rank's node: its shared-memory segment's id (the
// ranks the colocator started together), else its host name.
int64_t node_key() {
  const auto& t = detail::job_topology();
  if (auto seg = collectives::inherited_segment(t.rank))
    return static_cast<int64_t>(seg->header().id & 0x7fffffffffffffff);
  return static_cast<int64_t>(std::hash<std::string>{}(t.host) & 0x7fffffffffffffff);
}

// This member's place in the set: its index, and its local and cross rank
// among the members grouped by node (nodes in the order of their first
// member), as the host paths expect them.
topology set_topology(const std::vector<int>& ranks, const std::vector<int64_t>& keys, int me) {
  const auto& job = detail::job_topology();
  std::vector<int64_t> nodes;
  std::vector<int> local(ranks.size());
  std::map<int64_t, int> on_node;
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto key = keys[static_cast<size_t>(ranks[i])];
    if (std::find(nodes.begin(), nodes.end(), key) == nodes.end())
      nodes.push_back(key);
    local[i] = on_node[key]++;
  }
  auto i = static_cast<size_t>(std::find(ranks.begin(), ranks.end(), me) - ranks.begin());
  auto key = keys[static_cast<size_t>(me)];
  rank_layout where{
    .rank = static_cast<int>(i),
    .size = static_cast<int>(ranks.size()),
    .local_rank = local[i],
    .local_size = on_node[key],
    .cross_rank = static_cast<int>(std::find(nodes.begin(), nodes.end(), key) - nodes.begin()),
    .cross_size = static_cast<int>(nodes.size())};
  return {where, job.host};
}

// The set's segment on this node: its first local member creates one slot
// per local member (slots as large as the node's) and publishes where it
// is; the others open it. nullptr where that is not possible (then every
// member of the set goes over Gloo, and backend_info() says why).
std::shared_ptr<collectives::shm::segment> shared_segment(const topology& t,
                                                         collectives::rendezvous_client& store,
                                                         const std::string& key) {
  auto node = collectives::inherited_segment(detail::job_topology().rank);
  if (t.local_rank == 0) {
    std::shared_ptr<collectives::shm::segment> seg;
    try {
      if (node)
        seg = collectives::shm::segment::create(static_cast<uint32_t>(t.local_size),
                                                node->header().slot_bytes);
    } catch (const std::exception& e) {
      log::warn("hvd::add_process_set: no shared memory for the set ({}); using Gloo", e.what());
    }
    auto where = seg ? fmt::format("{} {} {}", ::getpid(), seg->fd(), seg->header().id) : "none";
    store.set(key, {where.begin(), where.end()});
    return seg;
  }
  auto value = store.get(key, store.timeout());
  long pid = 0, fd = -1;
  unsigned long long id = 0;
  if (!node || std::sscanf(std::string(value.begin(), value.end()).c_str(), "%ld %ld %llu", &pid,
                           &fd, &id) != 3)
    return nullptr;
  auto path = fmt::format("/proc/{}/fd/{}", pid, fd);
  int mine = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (mine < 0) {
    log::warn("hvd::add_process_set: cannot open the set's segment ({}); using Gloo", path);
    return nullptr;
  }
  std::shared_ptr<collectives::shm::segment> seg;
  try {
    seg = collectives::shm::segment::attach(mine);
  } catch (const std::exception& e) {
    log::warn("hvd::add_process_set: {}; using Gloo", e.what());
  }
  ::close(mine);
  return seg && seg->header().id == id ? seg : nullptr;
}

// The member's half of adding set `id`: connect to the other members.
std::shared_ptr<set_entry> connect_set(int id, const std::vector<int>& ranks,
                                       const std::vector<int64_t>& keys) {
  auto entry = std::make_shared<set_entry>();
  entry->ranks = ranks;
  auto t = set_topology(ranks, keys, detail::job_topology().rank);
  auto opts = detail::engine_options_from_env();
  opts.process_set_id = id;
  // Stalls name the members by their ranks in the job.
  opts.stall.members = ranks;
  opts.stall.process_set = id;
  opts.timeline = nullptr;
  opts.autotune.enabled = false; // Horovod tunes the global set only
  std::unique_ptr<collectives::backend> host;
  auto job = detail::job_connection_info();
  auto prefix = fmt::format("{}/ps.{}", job.prefix, id);
  if (t.size == 1) {
    host = collectives::make_local_backend();
  } else {
    entry->store = std::make_unique<collectives::rendezvous_client>(job.address, job.port,
                                                                    job.scope, opts.timeout);
    auto& store = *entry->store;
    auto seg_key = fmt::format("{}/segment.{}", prefix, t.cross_rank);
    host = collectives::make_host_backend(
      t, store, prefix, job.bind_host,
      {.gloo_allreduce = opts.gloo_allreduce,
       .paths = opts.paths,
       .segment = [&t, &store, seg_key] { return shared_segment(t, store, seg_key); },
       .members = ranks});
  }
  entry->engine = std::make_shared<detail::engine>(std::move(host), t, opts);
  auto keep = collectives::current_device();
  auto dev =
    collectives::setup_devices(t, *entry->engine, entry->store.get(), prefix, opts.timeout);
  collectives::restore_device(keep);
  entry->engine->set_device_backend(std::move(dev.device));
  return entry;
}

// Adds set `ranks` on every rank of the job: one allgather of each rank's
// part (its node, the ranks it passed, the set that already has them
// there) through the job's engine; every rank then adds the set, or
// refuses it with the same error (process_set_agreement.hpp), and the
// members learn where the others run.
process_set add_locked(registry& r, std::vector<int> ranks, const char* call) {
  int size = detail::job_topology().size;
  std::sort(ranks.begin(), ranks.end());
  collectives::set_proposal mine{.node = node_key(), .held = 0, .ranks = ranks};
  {
    std::lock_guard<std::mutex> lk{r.mu};
    for (auto& [id, e] : r.sets)
      if (e->ranks == ranks)
        mine.held = id;
  }
  std::vector<int64_t> table;
  {
    process_set_scope global{global_process_set()};
    auto words = collectives::encode(mine);
    table = allgather(std::span<const int64_t>(words));
  }
  auto all = collectives::decode_proposals(table, size);
  if (auto refusal = collectives::add_refusal(all, size, call); !refusal.empty())
    throw std::invalid_argument(refusal);
  std::vector<int64_t> keys;
  for (auto& p : all)
    keys.push_back(p.node);
  int id = r.next_id++;
  auto me = detail::job_topology().rank;
  std::shared_ptr<set_entry> entry;
  if (std::binary_search(ranks.begin(), ranks.end(), me)) {
    entry = connect_set(id, ranks, keys);
  } else {
    entry = std::make_shared<set_entry>();
    entry->ranks = ranks;
  }
  {
    std::lock_guard<std::mutex> lk{r.mu};
    r.sets[id] = entry;
  }
  process_set ps(ranks);
  process_set_access::set_id(ps, id);
  log::debug("hvd::{}: {} added ({})", call, describe(id, ranks),
             entry->engine ? entry->engine->host_backend().describe() : "not a member");
  return ps;
}

void refuse_elastic(const char* call) {
  if (elastic::detail::enabled())
    throw error(fmt::format("hvd::{}: process sets are not available in elastic jobs (the "
                            "ranks change with every reset)",
                            call));
}

} // namespace

process_set::process_set(std::vector<int> ranks) : ranks_(std::move(ranks)) {
  std::sort(ranks_.begin(), ranks_.end());
}

int process_set::rank() const {
  auto me = hvd::rank();
  auto i = std::find(ranks_.begin(), ranks_.end(), me);
  return i == ranks_.end() ? -1 : static_cast<int>(i - ranks_.begin());
}

bool process_set::included() const {
  return rank() >= 0;
}

std::string process_set::to_string() const {
  return describe(id_, ranks_);
}

process_set global_process_set() {
  process_set ps;
  if (is_initialized()) {
    std::vector<int> all(static_cast<size_t>(size()));
    for (int i = 0; i < size(); ++i)
      all[static_cast<size_t>(i)] = i;
    ps = process_set(std::move(all));
  }
  process_set_access::set_id(ps, 0);
  return ps;
}

void init(const std::vector<process_set*>& process_sets, bool dynamic) {
  init();
  if (!process_sets.empty() || dynamic)
    refuse_elastic("init");
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.admin};
  r.dynamic = dynamic || env::get_int(env::dynamic_process_sets, 0) != 0;
  for (auto* ps : process_sets)
    if (ps->id() < 0)
      *ps = add_locked(r, ps->ranks(), "init");
}

process_set add_process_set(std::vector<int> ranks) {
  detail::global_engine("add_process_set");
  refuse_elastic("add_process_set");
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.admin};
  if (!r.dynamic && env::get_int(env::dynamic_process_sets, 0) == 0)
    throw std::invalid_argument("hvd::add_process_set: Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow "
                                "adding process sets after Horovod initialization.");
  return add_locked(r, std::move(ranks), "add_process_set");
}

process_set add_process_set(const process_set& ranks) {
  return add_process_set(ranks.ranks());
}

bool remove_process_set(process_set& ps) {
  detail::global_engine("remove_process_set");
  auto& r = sets();
  std::lock_guard<std::mutex> admin{r.admin};
  if (!r.dynamic && env::get_int(env::dynamic_process_sets, 0) == 0)
    throw std::invalid_argument("hvd::remove_process_set: Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to "
                                "allow removing process sets after Horovod initialization.");
  // A set never added, removed, or the global one: false, as Horovod's
  // (the object says so on every rank). Else every rank agrees first
  // (process_set_agreement.hpp); the members then finish what is queued.
  if (ps.id() <= 0)
    return false;
  std::shared_ptr<set_entry> entry;
  std::map<int, std::vector<int>> known;
  {
    std::lock_guard<std::mutex> lk{r.mu};
    for (auto& [id, e] : r.sets)
      known[id] = e->ranks;
    if (auto i = r.sets.find(ps.id()); ps.id() > 0 && i != r.sets.end())
      entry = i->second;
  }
  std::vector<int64_t> mine{ps.id(), entry ? 1 : 0}, table;
  {
    process_set_scope global{global_process_set()};
    table = allgather(std::span<const int64_t>(mine));
  }
  std::vector<collectives::set_removal> all;
  for (size_t q = 0; q + 1 < table.size(); q += 2)
    all.push_back({static_cast<int>(table[q]), table[q + 1] != 0});
  auto decision = collectives::decide_removal(all, known);
  if (!decision.refusal.empty())
    throw std::invalid_argument(decision.refusal);
  if (!decision.remove || !entry)
    return decision.removed;
  {
    std::lock_guard<std::mutex> lk{r.mu};
    r.sets.erase(ps.id());
  }
  if (entry->engine)
    entry->engine->stop();
  process_set_access::set_id(ps, -1);
  return decision.removed;
}

std::vector<process_set> process_sets() {
  std::vector<process_set> all{global_process_set()};
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.mu};
  for (auto& [id, e] : r.sets) {
    process_set ps(e->ranks);
    process_set_access::set_id(ps, id);
    all.push_back(std::move(ps));
  }
  return all;
}

process_set_scope::process_set_scope(const process_set& ps) : previous_(current_set) {
  if (ps.id() < 0)
    throw std::invalid_argument(fmt::format(
      "hvd: {} was not added (hvd::init(sets) or hvd::add_process_set) or was removed",
      ps.to_string()));
  current_set = ps.id();
}

process_set_scope::~process_set_scope() {
  current_set = previous_;
}

process_set current_process_set() {
  if (current_set == 0)
    return global_process_set();
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.mu};
  process_set ps;
  if (auto i = r.sets.find(current_set); i != r.sets.end()) {
    ps = process_set(i->second->ranks);
    process_set_access::set_id(ps, current_set);
  }
  return ps;
}

void barrier(const process_set& ps) {
  process_set_scope on{ps};
  barrier();
}

namespace detail {

int current_set_id() {
  return current_set;
}

std::shared_ptr<engine> live_set_engine(int id) {
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.mu};
  auto i = r.sets.find(id);
  return i == r.sets.end() ? nullptr : i->second->engine;
}

engine& set_engine(int id, const char* call) {
  auto& r = sets();
  std::lock_guard<std::mutex> lk{r.mu};
  auto i = r.sets.find(id);
  if (i == r.sets.end())
    throw std::invalid_argument(fmt::format("hvd::{}: process set {} does not exist (removed, or "
                                            "added before the last hvd::init())",
                                            call, id));
  if (!i->second->engine)
    throw std::invalid_argument(fmt::format("hvd::{}: rank {} is not a member of {}", call,
                                            job_topology().rank, describe(id, i->second->ranks)));
  return *i->second->engine;
}

void close_process_sets() {
  auto& r = sets();
  std::map<int, std::shared_ptr<set_entry>> closing;
  {
    std::lock_guard<std::mutex> admin{r.admin};
    std::lock_guard<std::mutex> lk{r.mu};
    closing.swap(r.sets);
    r.next_id = 1;
    r.dynamic = false;
  }
  for (auto& [id, e] : closing)
    if (e->engine)
      e->engine->stop();
}

int set_rank() {
  return current_set == 0 ? rank() : engine_for("rank").topo().rank;
}

int set_size() {
  return current_set == 0 ? size() : engine_for("size").topo().size;
}

int engine_root(int root, const char* call) {
  engine_for(call); // a non-member hears that first
  const auto& job = job_topology();
  if (root < 0 || root >= job.size)
    throw std::invalid_argument(
      fmt::format("hvd::{}: root {} is not a rank (size {})", call, root, job.size));
  if (current_set == 0)
    return root;
  auto ps = current_process_set();
  auto i = std::find(ps.ranks().begin(), ps.ranks().end(), root);
  if (i == ps.ranks().end())
    throw std::invalid_argument(
      fmt::format("hvd::{}: root {} is not a member of {}", call, root, ps.to_string()));
  return static_cast<int>(i - ps.ranks().begin());
}

} // namespace detail

} // namespace hvactor::hvd
