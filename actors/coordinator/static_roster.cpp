#include "actors/coordinator/static_roster.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "actors/protocol/interfaces.hpp"
#include "base/internal/process.hpp"

namespace hvactor::detail {

void static_roster::plan(std::vector<std::string> node_of_rank) {
  ranks_.clear();
  for (auto& node : node_of_rank)
    ranks_.push_back(entry{node, node, 0, false, false});
  registered_ = 0;
  exited_ok_ = 0;
  failed_ = false;
}

static_roster::registration static_roster::registered(int rank, const std::string& node,
                                                      int32_t pid) {
  if (rank < 0 || rank >= size() || ranks_[rank].registered)
    return registration::unexpected;
  auto& e = ranks_[rank];
  e.registered = true;
  e.node = node;
  e.pid = pid;
  return ++registered_ == ranks_.size() ? registration::complete : registration::accepted;
}

bool static_roster::is_registered(int rank) const {
  return rank >= 0 && rank < size() && ranks_[rank].registered;
}

const std::string& static_roster::node_of(int rank) const {
  return ranks_.at(rank).node;
}

std::string static_roster::label(int rank) const {
  auto& e = ranks_.at(rank);
  if (e.registered)
    return fmt::format("rank {} on node '{}' (pid {})", rank, e.node, e.pid);
  return fmt::format("rank {} on node '{}'", rank, e.node);
}

std::vector<std::string> static_roster::missing() const {
  std::vector<std::string> out;
  for (int r = 0; r < size(); ++r)
    if (!ranks_[r].registered)
      out.push_back(fmt::format("rank {} on node '{}'", r, ranks_[r].planned));
  return out;
}

std::vector<std::string> static_roster::on_node(const std::string& node) const {
  std::vector<std::string> out;
  for (int r = 0; r < size(); ++r)
    if (ranks_[r].planned == node)
      out.push_back(ranks_[r].registered ? fmt::format("rank {} (pid {})", r, ranks_[r].pid)
                                         : fmt::format("rank {}", r));
  return out;
}

std::string static_roster::died(const proto::worker_exit& ex) const {
  auto how = describe_exit(ex.exit_code, ex.signal);
  auto text = is_registered(ex.world_rank)
                ? fmt::format("worker {} died: {}", label(ex.world_rank), how)
                : fmt::format("worker rank {} on node '{}' (pid {}) died before registering: {}",
                              ex.world_rank, ex.node_id, ex.pid, how);
  if (ex.stderr_tail.empty())
    return text + ". It wrote nothing to stderr.";
  return text + fmt::format(". Last stderr lines:\n  {}", fmt::join(ex.stderr_tail, "\n  "));
}

static_roster::launch_next static_roster::exited(int rank, bool ok) {
  if (rank < 0 || rank >= size() || ranks_[rank].exited)
    return failed_ ? launch_next::later_failure : launch_next::wait;
  ranks_[rank].exited = true;
  if (!ok) {
    if (failed_)
      return launch_next::later_failure;
    failed_ = true;
    return launch_next::first_failure;
  }
  if (++exited_ok_ == ranks_.size())
    return launch_next::all_ok;
  return launch_next::wait;
}

} // namespace hvactor::detail
