#include "hvactor/elastic_sampler.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

#include "hvactor/hvd.hpp"

namespace hvactor::hvd::elastic {

namespace {

// 0..n-1 in the order of epoch `epoch`: Fisher-Yates over mt19937_64
// (both fixed by the standard, unlike std::shuffle's distribution), so
// every rank and every build computes the same permutation.
std::vector<size_t> permutation(size_t n, bool shuffle, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = i;
  if (!shuffle || n < 2)
    return order;
  std::mt19937_64 gen(seed);
  for (size_t i = n - 1; i > 0; --i) {
    // Unbiased: draw again above the largest multiple of i + 1.
    uint64_t range = i + 1, limit = UINT64_MAX - UINT64_MAX % range, x = 0;
    do
      x = gen();
    while (x >= limit);
    std::swap(order[i], order[static_cast<size_t>(x % range)]);
  }
  return order;
}

} // namespace

elastic_sampler::elastic_sampler(size_t dataset_size, bool shuffle, uint64_t seed)
  : dataset_size_(dataset_size), shuffle_(shuffle), seed_(seed) {
  reset();
}

void elastic_sampler::set_epoch(int64_t epoch) {
  load_state({epoch, 0});
}

void elastic_sampler::record_batch(size_t, size_t batch_size) {
  processed_ += static_cast<int64_t>(batch_size) * replicas_;
}

void elastic_sampler::load_state(const state_dict& s) {
  if (s.epoch < 0 || s.processed_num < 0)
    throw std::invalid_argument("elastic_sampler: epoch " + std::to_string(s.epoch) +
                                " and processed count " + std::to_string(s.processed_num) +
                                " must not be negative");
  epoch_ = s.epoch;
  processed_ = s.processed_num;
  reset();
}

void elastic_sampler::reset() {
  if (is_initialized())
    reset(hvd::rank(), hvd::size());
  else
    reset(0, 1);
}

void elastic_sampler::reset(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("elastic_sampler: rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " is not a place in a world");
  replicas_ = size;
  auto order = permutation(dataset_size_, shuffle_, seed_ + static_cast<uint64_t>(epoch_));
  size_t done = std::min(static_cast<size_t>(processed_), order.size());
  std::vector<size_t> remaining(order.begin() + static_cast<std::ptrdiff_t>(done), order.end());
  auto n = static_cast<size_t>(size);
  size_t per_rank = (remaining.size() + n - 1) / n;
  // Padded with the tail's own first indices (Horovod's), so that every
  // rank gets per_rank of them.
  for (size_t i = 0; remaining.size() < per_rank * n; ++i)
    remaining.push_back(remaining[i]);
  indices_.clear();
  for (size_t i = static_cast<size_t>(rank); i < remaining.size(); i += n)
    indices_.push_back(remaining[i]);
}

} // namespace hvactor::hvd::elastic
