#pragma once
// The process sets Python names by id (hvactor.torch.ProcessSet holds the
// id; these calls resolve it).
#include "hvactor/hvd.hpp"

namespace hvactor::python {

/// The set with this id (0: the global set); std::invalid_argument for an
/// id that is not (or no longer) a set of the job.
hvd::process_set set_of(int id);

/// Runs the calls of this thread on set `id` while alive (nothing for the
/// global set).
class on_set {
public:
  explicit on_set(int id);
  on_set(const on_set&) = delete;
  on_set& operator=(const on_set&) = delete;

private:
  std::optional<hvd::process_set_scope> scope_;
};

} // namespace hvactor::python
