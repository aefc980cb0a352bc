#pragma once

// Internal: what hvd::init reads from the environment, once per init
// (Horovod's variables, named in base/internal/env_names.hpp). Nothing reads them
// per call. A malformed value fails init on every rank, naming the
// variable, instead of silently taking a default.

#include <string>

#include "collectives/backends/backend.hpp"
#include "collectives/engine/engine.hpp"

namespace hvactor::hvd::detail {

/// This machine's hostname.
std::string machine_hostname();

/// This rank's place in a static job (HOROVOD_RANK, _SIZE, _LOCAL_RANK, ...;
/// the host from HOROVOD_HOSTNAME or the machine's). std::invalid_argument
/// when the rank is not within the size.
collectives::topology topology_from_env();

/// The engine's and Gloo's knobs: fusion threshold, cycle time, response
/// cache, HOROVOD_GLOO_TIMEOUT_SECONDS, the stall inspector, the allreduce
/// algorithm and the host paths. std::invalid_argument naming the variable
/// and its allowed range when one is malformed.
engine_options engine_options_from_env();

} // namespace hvactor::hvd::detail
