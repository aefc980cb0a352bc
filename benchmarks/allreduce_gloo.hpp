#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "internal/algorithm.hpp"

namespace gloo {
class Context;
} // namespace gloo

namespace hvactor::bench {

/// The raw Gloo peer of the allreduce benchmark: a Gloo context of its own
/// (TCP on 127.0.0.1, full mesh through a FileStore), no hvactor in the
/// path. Its allreduce is the one hvactor runs: gloo::allreduce (the options
/// API) with the given algorithm, gloo::sum<float>, the default segment size.
///
/// Construction connects every rank and blocks until all `size` ranks joined
/// (or `timeout` passed; then it throws). Not thread-safe; one operation at
/// a time.
class raw_gloo {
public:
  /// Joins the mesh of `size` ranks as `rank`; `store_dir` is an existing,
  /// empty directory that every rank sees (one per mesh).
  raw_gloo(int rank, int size, const std::string& store_dir, std::chrono::milliseconds timeout);
  ~raw_gloo();

  raw_gloo(const raw_gloo&) = delete;
  raw_gloo& operator=(const raw_gloo&) = delete;

  /// In-place float sum of `data` across the ranks.
  void allreduce(float* data, size_t count, collectives::allreduce_algorithm algorithm);

  /// Returns once every rank called barrier().
  void barrier();

private:
  std::shared_ptr<gloo::Context> context_;
  std::chrono::milliseconds timeout_;
};

} // namespace hvactor::bench
