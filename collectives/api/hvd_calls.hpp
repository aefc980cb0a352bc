#pragma once

// Internal: what the files of the hvd API share (hvd.cpp owns the
// process's state; hvd_gather.cpp and hvd_async.cpp hold the calls that
// gather, scatter or run queued).

#include "collectives/backends/backend.hpp"
#include "collectives/engine/engine.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::hvd::detail {

/// The engine of the process set this thread's calls run on (the job's
/// outside a process_set_scope); throws not_started naming hvd::`call`
/// before hvd::init(), std::invalid_argument when this rank is not a
/// member of the set or the set was removed.
engine& engine_for(const char* call);

/// The job's engine, whatever the thread's process set.
engine& global_engine(const char* call);

/// This rank's place in the job (valid after hvd::init()).
const collectives::topology& job_topology();

/// The job's connection, which process sets connect under.
struct job_connection {
  /// The rendezvous store's scope ("<job>/<generation>").
  std::string scope;
  /// The key prefix of the job's connection ("gloo.<n>").
  std::string prefix;
  /// The store's address, and where this rank's Gloo listens.
  std::string address;
  uint16_t port = 0;
  std::string bind_host;
};
job_connection job_connection_info();

// process_sets.cpp

/// The process set of this thread's calls (0: the job's).
int current_set_id();

/// Set `id`'s engine for hvd::`call`: std::invalid_argument naming the set
/// when this rank is not a member, or naming the id when it does not exist.
engine& set_engine(int id, const char* call);

/// Set `id`'s engine, kept alive for a wait; nullptr once it was removed.
std::shared_ptr<engine> live_set_engine(int id);

/// Stops every process set's engine (hvd::shutdown, before the job's).
void close_process_sets();

/// Refuses, before anything is queued (on every rank alike: each makes the
/// same call), a reduction that means nothing for the type and scale
/// factors that are not finite or scale a bool.
void check_reduction(dtype t, op o, const char* call, scale_factors f = {});

/// A broadcast root (a global rank) as the engine of this thread's calls
/// numbers it; std::invalid_argument when it is not a rank (of the set).
int engine_root(int root, const char* call);

} // namespace hvactor::hvd::detail

namespace hvactor::hvd::detail {

/// The job engine's autotune changes on this rank (engine::tuning_history):
/// for tests and logs.
std::vector<std::string> autotune_history();

} // namespace hvactor::hvd::detail
