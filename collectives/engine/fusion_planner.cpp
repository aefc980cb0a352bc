#include "collectives/engine/fusion_planner.hpp"

namespace hvactor::collectives {

namespace {

hvd::op reduce_kind(hvd::op o) {
  return o == hvd::op::average ? hvd::op::sum : o;
}

} // namespace

size_t fusion_planner::batch_size(std::span<const fusion_entry> queue) const {
  if (queue.empty())
    return 0;
  size_t n = 1;
  size_t used = padded(queue[0].bytes);
  while (n < queue.size()) {
    auto next = padded(queue[n].bytes);
    if (used + next > threshold_)
      break;
    used += next;
    ++n;
  }
  return n;
}

std::vector<std::pair<size_t, size_t>> fusion_planner::groups(std::span<const fusion_entry> batch) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  for (size_t i = 1; i <= batch.size(); ++i) {
    if (i == batch.size() || batch[i].type != batch[begin].type
        || batch[i].device != batch[begin].device
        || reduce_kind(batch[i].reduction) != reduce_kind(batch[begin].reduction)) {
      out.emplace_back(begin, i);
      begin = i;
    }
  }
  return out;
}

} // namespace hvactor::collectives
