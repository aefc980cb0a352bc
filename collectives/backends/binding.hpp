#pragma once

#include <optional>
#include <string>

namespace hvactor::collectives {

/// HVACTOR_BIND_TO (mpirun's --bind-to): "none" (also unset or empty)
/// leaves the process where it is; "core" pins every thread of this
/// process (and, by inheritance, every thread it starts later) to the
/// `local_rank`-th of the cores it could first run on, when there are at
/// least `local_size` of them
/// (else it stays unbound and says so once on stderr, as mpirun refuses to
/// bind an oversubscribed node). Returns what it did, for messages: "none",
/// "core 3", "none (4 local ranks on 2 cores)". Anything else throws
/// std::invalid_argument naming the variable. The first call remembers the
/// process's cores, so that a later init (elastic, another local rank)
/// binds within them again.
std::string bind_from_env(int local_rank, int local_size);

/// What HOROVOD_THREAD_AFFINITY asks for this rank's engine thread.
struct thread_core_choice {
  /// The core it runs on; nullopt: unpinned.
  std::optional<int> core;
  /// Set when the variable is set but the thread stays unpinned, saying
  /// why ("HOROVOD_THREAD_AFFINITY='1' names 1 core for 2 local ranks").
  std::string unpinned;
};

/// HOROVOD_THREAD_AFFINITY (Horovod's): a comma-separated list of core
/// ids, one per local rank (more are ignored); local rank i's engine
/// thread (Horovod's background thread) runs on the i-th. Unset or empty:
/// unpinned. Fewer ids than local ranks: unpinned, said once on stderr
/// (Horovod logs it and goes on). Text, a negative id, or a core this
/// process cannot run on throw std::invalid_argument naming the variable.
thread_core_choice thread_core_from_env(int local_rank, int local_size);

/// Pins the calling thread to `core`; returns false when the kernel
/// refused.
bool pin_this_thread(int core) noexcept;

/// How many cores this process could run on before any binding of
/// bind_from_env (the node's share of cores for this job's ranks).
int first_core_count();

} // namespace hvactor::collectives
