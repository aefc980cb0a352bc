#pragma once

/// Horovod's `hvd` for C++ buffers: `namespace hvd = hvactor::hvd;`
///
/// Every collective is called by every rank (as with Horovod). Named async
/// allreduces pair by name, in any order per rank; unnamed calls pair by
/// call order ("allreduce.noname.<n>"). Calls block the calling thread,
/// except `allreduce_async`, whose handle `synchronize` waits for. A live
/// peer that is late is waited for (HOROVOD_STALL_CHECK_TIME_SECONDS warns
/// about it); errors are hvactor errors (hvactor/errors.hpp): a peer that
/// died fails the call on every surviving rank, after which the
/// collectives stay unusable until shutdown() + init().


#include "hvactor/hvd_core.hpp"
#include "hvactor/hvd_collectives.hpp"
// Device memory (GPU builds; clear errors otherwise).
#include "hvactor/hvd_device.hpp"
// Process sets (Horovod's process_set= argument).
#include "hvactor/hvd_process_set.hpp"
