#pragma once

// Internal: what the files of the hvd API share (hvd.cpp owns the
// process's state; hvd_gather.cpp and hvd_async.cpp hold the calls that
// gather, scatter or run queued).

#include "collectives/internal/backend.hpp"
#include "collectives/internal/engine.hpp"
#include "hvactor/hvd.hpp"

namespace hvactor::hvd::detail {

/// The process's engine; throws not_started naming hvd::`call` before
/// hvd::init().
engine& engine_for(const char* call);

/// This rank's place in the job (valid after hvd::init()).
const collectives::topology& job_topology();

/// Refuses, before anything is queued (on every rank alike: each makes the
/// same call), a reduction that means nothing for the type and scale
/// factors that are not finite or scale a bool.
void check_reduction(dtype t, op o, const char* call, scale_factors f = {});

/// Refuses a broadcast root that is not a rank.
void check_root(int root);

} // namespace hvactor::hvd::detail
