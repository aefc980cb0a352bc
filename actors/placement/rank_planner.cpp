#include "actors/placement/rank_planner.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvactor {

namespace {

/// Most offending ranks quoted in one message; the rest are counted.
constexpr std::size_t max_quoted = 8;

std::string quote_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < max_quoted; ++i) {
    if (i > 0)
      out += ", ";
    out += items[i];
  }
  if (items.size() > max_quoted)
    out += " and " + std::to_string(items.size() - max_quoted) + " more";
  return out;
}

} // namespace

void rank_planner::add(int rank, const std::string& node_id) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(),
                         [&](const auto& node) { return node.first == node_id; });
  if (it == nodes_.end()) {
    nodes_.emplace_back(node_id, std::vector<int>{});
    it = std::prev(nodes_.end());
  }
  it->second.push_back(rank);
  ++registered_;
}

std::vector<rank_layout> rank_planner::plan() const {
  const int n = registered_;
  // Validate first: every rank in 0..n-1, none twice. With n registrations
  // that also means none is missing, but a missing rank is what the user
  // should read about, so name those too.
  std::vector<const std::string*> owner(static_cast<std::size_t>(n), nullptr);
  std::vector<std::string> out_of_range;
  std::vector<std::string> duplicates;
  for (const auto& [node_id, ranks] : nodes_) {
    for (int rank : ranks) {
      if (rank < 0 || rank >= n) {
        out_of_range.push_back(std::to_string(rank) + " (node '" + node_id + "')");
      } else if (auto& seen = owner[static_cast<std::size_t>(rank)]; seen != nullptr) {
        duplicates.push_back(std::to_string(rank) + " (nodes '" + *seen + "' and '" + node_id
                             + "')");
      } else {
        seen = &node_id;
      }
    }
  }
  if (!out_of_range.empty() || !duplicates.empty()) {
    std::vector<std::string> missing;
    for (int rank = 0; rank < n; ++rank)
      if (owner[static_cast<std::size_t>(rank)] == nullptr)
        missing.push_back(std::to_string(rank));
    std::string msg = "rank planning: the " + std::to_string(n)
                      + " registered ranks must be exactly 0.." + std::to_string(n - 1)
                      + ", each once;";
    if (!duplicates.empty())
      msg += " registered twice: " + quote_list(duplicates) + ";";
    if (!out_of_range.empty())
      msg += " out of range: " + quote_list(out_of_range) + ";";
    if (!missing.empty())
      msg += " missing: " + quote_list(missing) + ";";
    msg.back() = '.';
    throw std::invalid_argument(msg);
  }
  // Horovod's finalize_registration: walk nodes in order; a worker's cross
  // rank is how many earlier nodes already had its local-rank index.
  std::vector<int> cross_sizes;
  std::vector<rank_layout> result(static_cast<std::size_t>(n));
  for (const auto& [node_id, ranks] : nodes_) {
    if (cross_sizes.size() < ranks.size())
      cross_sizes.resize(ranks.size(), 0);
    for (std::size_t local = 0; local < ranks.size(); ++local) {
      auto& layout = result[static_cast<std::size_t>(ranks[local])];
      layout.rank = ranks[local];
      layout.size = n;
      layout.local_rank = static_cast<int>(local);
      layout.local_size = static_cast<int>(ranks.size());
      layout.cross_rank = cross_sizes[local]++;
    }
  }
  for (auto& layout : result)
    layout.cross_size = cross_sizes[static_cast<std::size_t>(layout.local_rank)];
  return result;
}

} // namespace hvactor
