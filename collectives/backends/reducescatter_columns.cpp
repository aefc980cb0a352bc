#include "collectives/backends/reducescatter_columns.hpp"

#include <cstring>

#include "collectives/backends/shm/reduce.hpp"

namespace hvactor::collectives {

reducescatter_columns reducescatter_columns::plan(const host_paths& p,
                                                  std::span<const size_t> counts, int rank,
                                                  int local_rank) {
  std::vector<size_t> offsets(counts.size());
  for (size_t r = 1; r < counts.size(); ++r)
    offsets[r] = offsets[r - 1] + counts[r - 1];
  reducescatter_columns plan;
  size_t at = 0;
  for (int l = 0; l < p.local_size; ++l) {
    range column{at, 0};
    for (int c = 0; c < p.nodes; ++c) {
      auto r = static_cast<size_t>(p.world_of[static_cast<size_t>(c * p.local_size + l)]);
      plan.from.push_back({offsets[r], counts[r]});
      plan.to.push_back(at);
      at += counts[r];
      column.count += counts[r];
      if (l == local_rank)
        plan.sends.push_back(static_cast<int64_t>(counts[r]));
    }
    plan.columns.push_back(column);
  }
  plan.receives.assign(static_cast<size_t>(p.nodes),
                       static_cast<int64_t>(counts[static_cast<size_t>(rank)]));
  return plan;
}

void reducescatter_columns::arrange(const void* in, void* out, size_t esz) const {
  auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  for (size_t k = 0; k < from.size(); ++k)
    if (from[k].count > 0)
      std::memcpy(dst + to[k] * esz, src + from[k].begin * esz, from[k].count * esz);
}

void reducescatter_columns::fold(const void* received, void* out, hvd::dtype t,
                                 hvd::op o) const {
  auto part = receives.empty() ? size_t{0} : static_cast<size_t>(receives[0]);
  if (part == 0)
    return;
  auto* base = static_cast<const std::byte*>(received);
  std::vector<const void*> copies;
  for (size_t c = 0; c < receives.size(); ++c)
    copies.push_back(base + c * part * hvd::size_of(t));
  shm::reduce(out, nullptr, copies.data(), static_cast<int>(copies.size()), part, t, o);
}

} // namespace hvactor::collectives
