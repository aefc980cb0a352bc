// Shared-memory communicators for unit tests: a group of local ranks that
// are threads of this process on one new segment.
#pragma once

#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/backends/shm/communicator.hpp"
#include "collectives/backends/shm/segment.hpp"

namespace hvactor::test {

/// `n` communicators on one new segment of `slot_bytes` slots, local rank
/// k in [k].
inline std::vector<std::unique_ptr<collectives::shm::communicator>>
shm_group(int n, size_t slot_bytes = size_t{1} << 20) {
  namespace shm = collectives::shm;
  auto seg = shm::segment::create(static_cast<uint32_t>(n), slot_bytes);
  std::vector<std::unique_ptr<shm::communicator>> out;
  for (int k = 0; k < n; ++k) {
    shm::local_group g;
    g.local_rank = k;
    g.local_size = n;
    for (int r = 0; r < n; ++r) {
      g.ranks.push_back(r);
      g.pids.push_back(::getpid());
    }
    g.rank = k;
    g.size = n;
    g.host = "test";
    out.push_back(std::make_unique<shm::communicator>(seg, std::move(g),
                                                      std::chrono::milliseconds{10000}));
  }
  out[0]->reset();
  return out;
}

/// Runs body(k) on a thread per rank and joins them.
inline void on_every_rank(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> ts;
  for (int k = 0; k < n; ++k)
    ts.emplace_back(body, k);
  for (auto& t : ts)
    t.join();
}

} // namespace hvactor::test
