#pragma once

/// Horovod's ElasticSampler (horovod.torch.elastic.ElasticSampler) for C++:
/// partitions the indices 0..dataset_size-1 across the ranks like
/// DistributedSampler, and after a reset gives the indices not yet
/// processed in this epoch to the new world.
///
/// The order of an epoch is a permutation every rank computes alike (seed +
/// epoch; the identity without shuffle). record_batch() counts what the
/// whole world processed (batch_size x size() per call, as Horovod's).
/// reset() (after a change of the world: torch_state::track() calls it on
/// restore, sync and every reset) takes the permutation's remaining tail,
/// pads it to a multiple of the new size with its own first indices, and
/// gives rank r every size()-th index from r. Its state (epoch, processed
/// count) is what a torch_state commits, restores and syncs.
///
///   hvd::elastic::elastic_sampler sampler{dataset.size()};
///   hvd::elastic::torch_state state{model, opt};
///   state.track(sampler);
///   hvd::elastic::run(state, [&] {
///     for (; state["epoch"] < epochs; ++state["epoch"]) {
///       auto idx = sampler.indices();
///       for (size_t b = 0; b * bs < idx.size(); ++b) {
///         ... train on idx[b * bs, (b + 1) * bs) ...
///         sampler.record_batch(b, bs);
///         state.commit();
///       }
///       sampler.set_epoch(state["epoch"] + 1);  // at the end of the epoch
///     }
///   });

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvactor::hvd::elastic {

class elastic_sampler {
public:
  /// What a state keeps (Horovod's state_dict: epoch, processed_num).
  struct state_dict {
    int64_t epoch = 0;
    int64_t processed_num = 0;
  };

  /// `dataset_size` indices; `seed` must be equal on every rank. Resets
  /// for the current world (size 1 before hvd::init()).
  explicit elastic_sampler(size_t dataset_size, bool shuffle = true, uint64_t seed = 0);

  /// The next epoch: its own permutation, nothing processed. Call it at
  /// the end of an epoch (Horovod's advice): a partly processed epoch then
  /// never repeats its samples.
  void set_epoch(int64_t epoch);

  /// The world processed a batch of `batch_size` per rank.
  void record_batch(size_t batch_idx, size_t batch_size);

  /// Repartitions the unprocessed indices over the current world
  /// (hvd::rank(), hvd::size(); rank 0 of 1 before init).
  void reset();
  /// The same for an explicit place (tests, tools).
  void reset(int rank, int size);

  /// This rank's indices for the rest of the epoch (padded: every rank
  /// gets as many).
  const std::vector<size_t>& indices() const noexcept {
    return indices_;
  }
  /// How many: Horovod's len(sampler).
  size_t size() const noexcept {
    return indices_.size();
  }

  state_dict state() const noexcept {
    return {epoch_, processed_};
  }
  /// Takes `s` and resets (Horovod's load_state_dict). Throws
  /// std::invalid_argument for a negative epoch or count.
  void load_state(const state_dict& s);

  int64_t epoch() const noexcept {
    return epoch_;
  }
  int64_t processed_num() const noexcept {
    return processed_;
  }
  size_t dataset_size() const noexcept {
    return dataset_size_;
  }

private:
  size_t dataset_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t processed_ = 0;
  int replicas_ = 1;
  std::vector<size_t> indices_;
};

} // namespace hvactor::hvd::elastic
