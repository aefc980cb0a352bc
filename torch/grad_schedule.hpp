#pragma once

// Private to the LibTorch adapter: when distributed_optimizer starts each
// gradient's allreduce (Horovod's per-parameter _allreduce_delay and group
// counts), as a plain class on parameter indices, tested without LibTorch
// or a job. Not thread-safe: the optimizer holds its lock around every call.

#include <cstddef>
#include <vector>

namespace hvactor::hvd::detail {

/// Parameters travel in units: a unit is one parameter, or a group whose
/// allreduces start together once every member's gradient is ready. Each
/// parameter counts the backward passes that produced its gradient; the
/// k-th (k = backward_passes_per_step) makes it ready. flush() hands out
/// what was not started, in unit order, which is the same on every rank.
class grad_schedule {
public:
  /// `units`: the parameters to reduce, each at most once, in launch order;
  /// indices below `params`. Throws std::invalid_argument otherwise or
  /// when `passes` < 1.
  grad_schedule(size_t params, std::vector<std::vector<size_t>> units, int passes);

  /// Horovod's split_list: `ids` in `n` consecutive groups whose sizes
  /// differ by at most one, the larger first; empty groups are left out.
  static std::vector<std::vector<size_t>> split(const std::vector<size_t>& ids, int n);

  /// The units for `ids` (every reduced parameter, in order): the explicit
  /// `groups` first (members not in `ids` dropped, empty groups left out),
  /// then every parameter of `ids` in none of them, alone. Throws
  /// std::invalid_argument when a parameter appears in two groups.
  static std::vector<std::vector<size_t>> with_groups(const std::vector<size_t>& ids,
                                                      const std::vector<std::vector<size_t>>& groups);

  /// True when parameter `i` already counted `passes` backward passes since
  /// the last flush(): another gradient for it is one too many.
  bool exhausted(size_t i) const;

  /// A backward pass produced parameter `i`'s gradient (i not exhausted):
  /// the parameters to start now, in order: none, `i`, or its whole group.
  std::vector<size_t> on_gradient(size_t i);

  /// synchronize(): every parameter not started yet, in unit order; then
  /// every count starts again from `passes`.
  std::vector<size_t> flush();

  /// Changes k; every count starts again from it (Horovod's
  /// set_backward_passes_per_step).
  void set_passes(int passes);

  /// True when no gradient was counted since the last flush().
  bool idle() const noexcept {
    return counted_ == 0;
  }

  const std::vector<std::vector<size_t>>& units() const noexcept {
    return units_;
  }

private:
  void reset();

  static constexpr size_t none = static_cast<size_t>(-1);
  std::vector<std::vector<size_t>> units_;
  std::vector<size_t> unit_of_;   // per parameter; none: not reduced
  std::vector<int> remaining_;    // per parameter: passes still to count
  std::vector<bool> started_;     // per parameter
  std::vector<size_t> ready_;     // per unit: members whose count reached 0
  int passes_;
  size_t counted_ = 0;
};

} // namespace hvactor::hvd::detail
