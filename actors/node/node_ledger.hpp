#pragma once

// Internal: the resource book of one node (node_agent.cpp keeps one). A
// plain class: no actors, no I/O, so its rules are unit-tested on their own
// (tests/unit/node_ledger_test.cpp).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/protocol/interfaces.hpp"

namespace hvactor {

/// CPUs and GPU ids of one node and the reservations that hold them, one
/// per job.
///
/// Invariants, whatever the sequence of calls: no job holds more than once;
/// the reservations' CPUs and GPUs add up to at most the totals, so free
/// counts are never negative; a GPU id belongs to at most one reservation;
/// free GPUs == number of free GPU ids. A reservation is first held for its
/// requester and may then be claimed by the job's colocator. Not
/// thread-safe (one actor owns it).
class node_ledger {
public:
  /// A node `node_id` offering `num_cpus` CPUs and the GPUs `gpu_ids`; an id
  /// listed twice is one GPU (--gpu-ids 0,0). Throws std::invalid_argument,
  /// naming the value, for negative CPUs or a negative GPU id.
  node_ledger(std::string node_id, int32_t num_cpus, std::vector<int32_t> gpu_ids);

  /// Sets aside `want` for `job`, all or nothing, GPUs by lowest free id.
  /// Errors (hvactor error kinds): invalid_argument for negative amounts;
  /// placement_timeout when `job` already holds here (one colocator per
  /// node and job) or when `want` exceeds what is free, naming both.
  caf::expected<proto::reservation> reserve(const std::string& job,
                                            const proto::resources& want);

  /// The reservation `job`'s colocator may claim (a driver's `release`
  /// frees only such a one); placement_timeout when `job` holds none here
  /// or it was claimed already.
  caf::expected<proto::reservation> claimable(const std::string& job) const;

  /// Hands `job`'s reservation to its colocator, which frees it with
  /// `release` when it ends. No-op for a job that holds nothing.
  void claim(const std::string& job);

  /// Frees `job`'s reservation, claimed or not; false when it held none.
  bool release(const std::string& job);


  /// Jobs holding resources here, ascending.
  std::vector<std::string> jobs() const;

  /// Everything this node offers.
  proto::resources total() const;

  /// What no reservation holds.
  proto::resources free() const;

  /// GPU ids no reservation holds, ascending.
  std::vector<int32_t> free_gpu_ids() const;

  /// Every GPU id of the node, ascending, each once.
  const std::vector<int32_t>& gpu_ids() const noexcept {
    return gpu_ids_;
  }

  /// Fills the resource fields of a node_info (total, free, gpu_ids,
  /// free_gpu_ids, jobs), what `info` and registry updates report; the
  /// other fields are the caller's.
  void fill(proto::node_info& info) const;

private:
  struct entry {
    proto::reservation res;
    bool claimed = false;
  };

  std::string node_id_;
  int32_t num_cpus_ = 0;
  std::vector<int32_t> gpu_ids_;
  std::map<std::string, entry> held_; // by job id
};

} // namespace hvactor
