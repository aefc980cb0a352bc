#include "collectives/backends/host_backend.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "collectives/backends/gloo/gloo_backend.hpp"
#include "collectives/backends/cross_pipeline.hpp"
#include "collectives/backends/reducescatter_columns.hpp"
#include "hvactor/errors.hpp"
#include "base/internal/env_names.hpp"
#include "base/internal/log.hpp"
#include "collectives/backends/shm/communicator.hpp"

namespace hvactor::collectives {

// The segment the colocator handed down, or nullptr (none, or not usable:
// then this rank reports segment 0 and the job runs over Gloo).
std::shared_ptr<shm::segment> inherited_segment(int rank) {
  auto fd_text = env::get(env::shm_fd);
  if (!fd_text || fd_text->empty())
    return nullptr;
  int fd = std::atoi(fd_text->c_str());
  try {
    auto seg = shm::segment::attach(fd);
    // The user's own child processes must not inherit it.
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return seg;
  } catch (const std::exception& e) {
    log::warn("hvd::init on rank {}: no shared memory ({}); using Gloo's TCP", rank, e.what());
    return nullptr;
  }
}

namespace {

std::string mib(size_t bytes) {
  return fmt::format("{:g} MiB", static_cast<double>(bytes) / (1 << 20));
}

/// Where each of the consecutive parts of `counts` elements begins, in
/// units of `unit`.
std::vector<size_t> offsets_of(std::span<const size_t> counts, size_t unit) {
  std::vector<size_t> offsets(counts.size());
  for (size_t r = 1; r < counts.size(); ++r)
    offsets[r] = offsets[r - 1] + counts[r - 1] * unit;
  return offsets;
}

/// A hierarchical allreduce of at least twice this much is pipelined in
/// chunks of it (hierarchical_allreduce).
constexpr size_t hierarchical_chunk_bytes = size_t{4} << 20;

class host_backend : public backend {
public:
  host_backend(const topology& topo, rendezvous_client& client, const std::string& prefix,
               const std::string& bind_host, const host_backend_options& opts)
    : topo_(topo), members_(opts.members) {
    gloo_ = make_gloo_backend(topo, client, prefix, bind_host, opts.gloo_allreduce, members_);
    std::shared_ptr<shm::segment> seg;
    if (opts.paths.shm)
      seg = opts.segment ? opts.segment() : inherited_segment(topo.rank);
    auto table = exchange_places(seg);
    paths_ = host_paths::plan(table, topo.rank, opts.paths);
    if (paths_.shm) {
      shm::local_group g;
      g.local_rank = topo.local_rank;
      g.local_size = paths_.local_size;
      g.ranks = paths_.local_ranks;
      for (int r : g.ranks)
        g.pids.push_back(static_cast<pid_t>(table[static_cast<size_t>(r)].pid));
      g.rank = topo.rank;
      g.size = topo.size;
      g.host = topo.host;
      comm_ = std::make_unique<shm::communicator>(seg, std::move(g), client.timeout());
      if (topo.local_rank == 0)
        comm_->reset();
      // Nobody takes a step before the reset.
      gloo_->barrier();
    }
    if (hierarchical()) {
      topology cross{rank_layout{.rank = topo.cross_rank,
                                 .size = paths_.nodes,
                                 .local_rank = 0,
                                 .local_size = 1,
                                 .cross_rank = topo.cross_rank,
                                 .cross_size = paths_.nodes},
                     topo.host};
      cross_ = make_gloo_backend(cross, client, fmt::format("{}/cross.{}", prefix, topo.local_rank),
                                 bind_host, opts.gloo_allreduce,
                                 paths_.job_ranks_across(topo.local_rank, members_));
    }
  }

  void allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) override {
    if (count == 0)
      return;
    guarded([&] {
      if (paths_.single_node)
        comm_->allreduce(data, count, t, o);
      else if (paths_.hierarchical_allreduce)
        hierarchical_allreduce(data, count, t, o);
      else
        gloo_->allreduce(data, count, t, o);
    });
  }

  bool allreduce_with_header(int64_t* header, size_t words, size_t data_word, void* data,
                             size_t count, hvd::dtype t, hvd::op o,
                             const std::function<bool(std::span<const int64_t>)>& accept) override {
    if (!paths_.single_node && paths_.hierarchical_allreduce)
      return false;
    bool done = false;
    guarded([&] {
      done = paths_.single_node
               ? comm_->allreduce_with_header(header, words, data_word, data, count, t, o, accept)
               : gloo_->allreduce_with_header(header, words, data_word, data, count, t, o, accept);
    });
    return done;
  }

  // Across nodes over Gloo alone, a header goes in the same messages as
  // allreduce_with_header's (a rank that sends data meets one that sends
  // none); elsewhere on the path allreduce() takes.
  void exchange_header(int64_t* header, size_t words, size_t data_word) override {
    if (paths_.single_node || paths_.hierarchical_allreduce)
      return backend::exchange_header(header, words, data_word);
    guarded([&] { gloo_->exchange_header(header, words, data_word); });
  }

  // One node: the shared-memory reduce-scatter with Horovod's split (each
  // rank reduces only its part); hierarchical: each column reduced on the
  // node, then reduce-scattered across the nodes (reducescatter_columns);
  // over Gloo alone: the default (an allreduce, then the part).
  void reducescatter(void* data, size_t count, std::span<const size_t> counts, int rank,
                     hvd::dtype t, hvd::op o, void* out) override {
    if (!paths_.single_node && !paths_.hierarchical_allreduce)
      return backend::reducescatter(data, count, counts, rank, t, o, out);
    if (paths_.hierarchical_allreduce && !paths_.single_node)
      return guarded([&] { hierarchical_reducescatter(data, count, counts, rank, t, o, out); });
    auto offsets = offsets_of(counts, 1);
    std::vector<shm::communicator::range> parts;
    for (int r : paths_.local_ranks)
      parts.push_back({offsets[static_cast<size_t>(r)], counts[static_cast<size_t>(r)]});
    guarded([&] { comm_->reduce_scatter(data, parts, t, o); });
    auto esz = hvd::size_of(t);
    auto me = static_cast<size_t>(rank);
    copy(out, static_cast<char*>(data) + offsets[me] * esz, counts[me] * esz);
  }

  bool allreduce_parts(std::span<const buffer_part> parts, hvd::dtype t, hvd::op o) override {
    if (!paths_.single_node)
      return false;
    guarded([&] { comm_->allreduce(parts, t, o); });
    return true;
  }

  void allgatherv(const void* in, void* out, std::span<const size_t> counts,
                  hvd::dtype t) override {
    guarded([&] {
      if (paths_.single_node)
        local_allgatherv(in, out, counts, t);
      else if (paths_.hierarchical_allgather)
        hierarchical_allgatherv(in, out, counts, t);
      else
        gloo_->allgatherv(in, out, counts, t);
    });
  }

  void broadcast(void* data, size_t count, hvd::dtype t, int root) override {
    if (count == 0)
      return;
    guarded([&] {
      auto bytes = count * hvd::size_of(t);
      if (paths_.single_node) {
        comm_->broadcast(data, bytes, local_index(root));
      } else if (paths_.hierarchical_allreduce) {
        // Across nodes among the ranks with the root's local rank, then
        // inside every node from that rank.
        auto root_local = static_cast<int>(root_place(root) % paths_.local_size);
        auto root_cross = static_cast<int>(root_place(root) / paths_.local_size);
        if (topo_.local_rank == root_local)
          across([&] { cross_->broadcast(data, count, t, root_cross); });
        comm_->broadcast(data, bytes, root_local);
      } else {
        gloo_->broadcast(data, count, t, root);
      }
    });
  }

  void barrier() override {
    guarded([&] {
      if (paths_.single_node) {
        comm_->barrier();
      } else if (hierarchical()) {
        comm_->barrier();
        across([&] { cross_->barrier(); });
        comm_->barrier();
      } else {
        gloo_->barrier();
      }
    });
  }

  void alltoallv(const void* in, std::span<const int64_t> send_counts, void* out,
                 std::span<const int64_t> recv_counts, hvd::dtype t) override {
    guarded([&] { gloo_->alltoallv(in, send_counts, out, recv_counts, t); });
  }

  const char* name() const override {
    if (paths_.single_node)
      return "shm";
    return hierarchical() ? "hierarchical" : "gloo";
  }

  std::string describe() const override {
    if (paths_.single_node)
      return fmt::format("allreduce: shm, allgather: shm, broadcast: shm, barrier: shm, "
                         "reducescatter: shm, alltoall: gloo ({} ranks on {} share its "
                         "shared-memory segment, {} slots)",
                         paths_.local_size, topo_.host, mib(comm_->slot_bytes()));
    if (hierarchical()) {
      auto h = [](bool on) { return on ? "hierarchical" : "gloo"; };
      return fmt::format("allreduce: {}, allgather: {}, broadcast: {}, barrier: hierarchical, "
                         "reducescatter: {}, alltoall: gloo ({} nodes x {} ranks: shared memory "
                         "inside a node, Gloo across nodes)",
                         h(paths_.hierarchical_allreduce), h(paths_.hierarchical_allgather),
                         h(paths_.hierarchical_allreduce), h(paths_.hierarchical_allreduce),
                         paths_.nodes, paths_.local_size);
    }
    return fmt::format("allreduce: gloo, allgather: gloo, broadcast: gloo, barrier: gloo, "
                       "reducescatter: gloo, alltoall: gloo ({})",
                       paths_.why.empty() ? "one rank per node" : paths_.why);
  }

  bool hierarchical_tunable() const override {
    return cross_ != nullptr;
  }
  std::pair<bool, bool> hierarchical_switches() const override {
    return {paths_.hierarchical_allreduce, paths_.hierarchical_allgather};
  }
  // Autotune switches between the hierarchical and the flat Gloo path
  // where a layout has both (the cross-node contexts stay connected).
  void set_hierarchical(bool allreduce, bool allgather) override {
    if (!cross_)
      return;
    paths_.hierarchical_allreduce = allreduce;
    paths_.hierarchical_allgather = allgather;
  }

private:
  bool hierarchical() const {
    return paths_.hierarchical_allreduce || paths_.hierarchical_allgather;
  }

  // Every rank's segment and place, through the flat Gloo context.
  std::vector<rank_place> exchange_places(const std::shared_ptr<shm::segment>& seg) {
    rank_place mine{.segment = seg ? seg->header().id : 0,
                    .slots = seg ? seg->header().slots : 0,
                    .local_rank = topo_.local_rank,
                    .local_size = topo_.local_size,
                    .cross_rank = topo_.cross_rank,
                    .cross_size = topo_.cross_size,
                    .pid = ::getpid()};
    static_assert(sizeof(rank_place) == 7 * sizeof(int64_t));
    std::vector<rank_place> table(static_cast<size_t>(topo_.size));
    std::vector<size_t> counts(table.size(), 7);
    gloo_->allgatherv(&mine, table.data(), counts, hvd::dtype::int64);
    return table;
  }

  // Horovod's shape: reduce-scatter inside the node, one allreduce of each
  // rank's slice across the nodes (every local rank drives its share of the
  // network), allgather inside the node. A large buffer goes through in
  // chunks, the cross-node part of chunk k on a second thread while this
  // one reduces chunk k + 1 and gathers chunk k - 1: done one after the
  // other, the two shared-memory passes left the link idle for 25-40 ms of
  // a 64 MiB allreduce at 1 Gbit/s (docs/benchmarks/multi-node.md). Every
  // local rank calls the shared-memory steps in the same order.
  void hierarchical_allreduce(void* data, size_t count, hvd::dtype t, hvd::op o) {
    const size_t esz = hvd::size_of(t);
    const size_t chunk = std::max<size_t>(hierarchical_chunk_bytes / esz, 1);
    auto* base = static_cast<std::byte*>(data);
    auto cross_part = [this, esz, t, o](std::byte* p, size_t n) {
      auto mine = comm_->slice(n, t, topo_.local_rank);
      return [this, p = p + mine.begin * esz, n = mine.count, t, o] {
        if (n > 0)
          across([&] { cross_->allreduce(p, n, t, o); });
      };
    };
    if (count < 2 * chunk) {
      comm_->reduce_scatter(data, count, t, o);
      cross_part(base, count)();
      comm_->allgather_slices(data, count, t);
      return;
    }
    const size_t chunks = (count + chunk - 1) / chunk;
    auto at = [&](size_t k) { return base + k * chunk * esz; };
    auto size = [&](size_t k) { return std::min(chunk, count - k * chunk); };
    cross_pipeline pipe(*cross_);
    for (size_t k = 0; k <= chunks; ++k) {
      if (k < chunks) {
        comm_->reduce_scatter(at(k), size(k), t, o);
        pipe.submit(cross_part(at(k), size(k)));
      }
      if (k > 0) {
        pipe.wait(k);
        comm_->allgather_slices(at(k - 1), size(k - 1), t);
      }
    }
  }

  // The node's ranks reduce the columns (column l into local rank l) on
  // shared memory; the ranks of local rank l send each part of their
  // column to its owner across the nodes (one alltoall: every element
  // crosses once), and each reduces the copies it received, node 0's
  // first.
  void hierarchical_reducescatter(const void* data, size_t count, std::span<const size_t> counts,
                                  int rank, hvd::dtype t, hvd::op o, void* out) {
    const size_t esz = hvd::size_of(t);
    auto plan = reducescatter_columns::plan(paths_, counts, rank, topo_.local_rank);
    gathered_.resize(std::max<size_t>(count * esz, 1));
    plan.arrange(data, gathered_.data(), esz);
    std::vector<shm::communicator::range> parts;
    for (auto& c : plan.columns)
      parts.push_back({c.begin, c.count});
    comm_->reduce_scatter(gathered_.data(), parts, t, o);
    auto mine = plan.columns[static_cast<size_t>(topo_.local_rank)];
    auto part = counts[static_cast<size_t>(rank)];
    if (mine.count == 0) // the same on every node: nothing to send here
      return;
    column_.resize(std::max<size_t>(part * static_cast<size_t>(paths_.nodes) * esz, 1));
    across([&] {
      cross_->alltoallv(gathered_.data() + mine.begin * esz, plan.sends, column_.data(),
                        plan.receives, t);
    });
    plan.fold(column_.data(), out, t, o);
  }

  int local_index(int world_rank) const {
    for (size_t k = 0; k < paths_.local_ranks.size(); ++k)
      if (paths_.local_ranks[k] == world_rank)
        return static_cast<int>(k);
    return 0;
  }

  // c * local_size + l of world rank `r`.
  size_t root_place(int r) const {
    for (size_t i = 0; i < paths_.world_of.size(); ++i)
      if (paths_.world_of[i] == r)
        return i;
    return 0;
  }

  void local_allgatherv(const void* in, void* out, std::span<const size_t> counts,
                        hvd::dtype t) {
    auto esz = hvd::size_of(t);
    auto offsets = offsets_of(counts, esz);
    std::vector<size_t> bytes, where;
    for (int r : paths_.local_ranks) {
      bytes.push_back(counts[static_cast<size_t>(r)] * esz);
      where.push_back(offsets[static_cast<size_t>(r)]);
    }
    comm_->allgatherv(in, out, bytes, where);
  }

  // The blocks of this rank's local rank on every node (across nodes over
  // Gloo), then every local rank's column (shared memory), then each block
  // to its world rank's place.
  void hierarchical_allgatherv(const void* in, void* out, std::span<const size_t> counts,
                               hvd::dtype t) {
    const size_t esz = hvd::size_of(t);
    const int n = paths_.local_size, nodes = paths_.nodes;
    auto world = [&](int c, int l) {
      return static_cast<size_t>(paths_.world_of[static_cast<size_t>(c * n + l)]);
    };
    std::vector<size_t> column(static_cast<size_t>(nodes));
    size_t column_count = 0;
    for (int c = 0; c < nodes; ++c)
      column_count += column[static_cast<size_t>(c)] = counts[world(c, topo_.local_rank)];
    std::vector<size_t> bytes(static_cast<size_t>(n)), where(static_cast<size_t>(n));
    size_t total = 0;
    for (int l = 0; l < n; ++l) {
      where[static_cast<size_t>(l)] = total;
      for (int c = 0; c < nodes; ++c)
        bytes[static_cast<size_t>(l)] += counts[world(c, l)] * esz;
      total += bytes[static_cast<size_t>(l)];
    }
    if (total == 0)
      return;
    column_.resize(std::max<size_t>(column_count * esz, 1));
    gathered_.resize(total);
    across([&] { cross_->allgatherv(in, column_.data(), column, t); });
    comm_->allgatherv(column_.data(), gathered_.data(), bytes, where);
    auto offsets = offsets_of(counts, esz);
    auto* dst = static_cast<std::byte*>(out);
    for (int l = 0; l < n; ++l) {
      size_t from = where[static_cast<size_t>(l)];
      for (int c = 0; c < nodes; ++c) {
        auto r = world(c, l);
        auto len = counts[r] * esz;
        if (len > 0)
          std::memcpy(dst + offsets[r], gathered_.data() + from, len);
        from += len;
      }
    }
  }

  // A call on the Gloo context across nodes: its errors count ranks within
  // that context (one per node); say which world ranks they are.
  template <class F>
  void across(F&& f) {
    try {
      f();
    } catch (const collective_error& e) {
      int peer = -1;
      if (e.peer() >= 0)
        peer = paths_.world_of[static_cast<size_t>(e.peer() * paths_.local_size + topo_.local_rank)];
      throw collective_error(
        fmt::format("{} (across nodes, among the ranks with local rank {}: this is world rank {} "
                    "on {}, the peer{})",
                    e.what(), topo_.local_rank, topo_.rank, topo_.host,
                    peer >= 0 ? " is world rank " + std::to_string(peer) : " is not known"),
        peer);
    }
  }

  // Any failure: leave the segment and close every Gloo connection, so
  // that local and remote peers fail now; later calls are refused.
  template <class F>
  void guarded(F&& f) {
    if (!broken_.empty())
      throw collective_error(fmt::format("hvd: operation refused on rank {} ({}): an earlier one "
                                         "failed ({}); call hvd::shutdown() and hvd::init() to "
                                         "reconnect",
                                         topo_.rank, topo_.host, broken_));
    try {
      f();
    } catch (const collective_error& e) {
      auto named = in_job_ranks(e);
      leave(named.what());
      throw named;
    } catch (const std::exception& e) {
      leave(e.what());
      throw;
    }
  }

  void leave(const std::string& why) {
    broken_ = why;
    if (comm_)
      comm_->leave();
    cross_.reset();
    gloo_.reset();
  }

  // In a process set, ranks in messages count within the set: say which
  // ranks of the job they are (the peer the error names included).
  collective_error in_job_ranks(const collective_error& e) const {
    if (members_.empty())
      return e;
    auto job_rank = [&](int r) {
      return r >= 0 && static_cast<size_t>(r) < members_.size() ? members_[static_cast<size_t>(r)]
                                                                 : -1;
    };
    int peer = job_rank(e.peer());
    return collective_error(
      fmt::format("{} (ranks above count within the process set of job ranks {}: this is job "
                  "rank {}{})",
                  e.what(), fmt::join(members_, ", "), job_rank(topo_.rank),
                  peer >= 0 ? ", the peer is job rank " + std::to_string(peer) : ""),
      peer);
  }

  topology topo_;
  std::vector<int> members_;
  host_paths paths_;
  std::unique_ptr<backend> gloo_;
  std::unique_ptr<backend> cross_;
  std::unique_ptr<shm::communicator> comm_;
  std::vector<std::byte> column_, gathered_;
  std::string broken_;
};

} // namespace

std::unique_ptr<backend> make_host_backend(const topology& topo, rendezvous_client& client,
                                           const std::string& prefix,
                                           const std::string& bind_host,
                                           const host_backend_options& opts) {
  return std::make_unique<host_backend>(topo, client, prefix, bind_host, opts);
}

} // namespace hvactor::collectives
