#pragma once

// Internal: timing of elastic jobs and host discovery; one of the knob files
// (base/internal/knobs.hpp lists them), each value named once with the reason
// for it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/internal/knobs_jobs.hpp"

namespace hvactor::knobs {

using namespace std::chrono_literals;

// -- elastic jobs --------------------------------------------------------------------

/// Discovery polls (executor_options::discovery_period's default, Horovod's
/// DISCOVER_HOSTS_FREQUENCY_SECS).
inline constexpr auto discovery_period = 1s;

/// One run of a host discovery script (discovery::script) may take this
/// long; then it is killed and the poll failed.
inline constexpr auto discovery_script_limit = 10s;

/// A worker's collectives failed and it asks for a new generation: the
/// driver waits this long for the exit report of a worker that died, so
/// that one reset covers both.
inline constexpr auto elastic_reset_grace = 250ms;

/// check_host_updates() (and commit()) agree on host changes with one small
/// broadcast about this often, skipping the checks in between.
inline constexpr auto elastic_check_interval = 50ms;

/// hvd::init in an elastic job gives up after this many generations in a
/// row that did not connect.
inline constexpr int elastic_init_attempts = 5;

/// A worker leaving the job (its host is gone) may take this long to reach
/// its next commit and see the change; then its process is stopped.
inline constexpr auto elastic_leave_grace = 10s;

/// Once a worker returned successfully, the others may take this long to
/// return too (Horovod: the job stops on the first success).
inline constexpr auto elastic_finish_grace = 10s;

/// hvactor::train: one report() waits this long for every other rank's
/// report of the same iteration and for the driver to persist rank 0's
/// checkpoint (a slow rank still finishing its epoch, a large checkpoint).
inline constexpr auto train_report_limit = std::chrono::minutes{30};

/// Device backends poll NCCL and CUDA streams against the job's timeout
/// (NCCL calls are nonblocking so that a dead peer never hangs): back to
/// back, yielding the core between polls, for the first `device_spin` of a
/// wait (a collective or copy usually completes within it: measured on an
/// H100, sleeping from the first poll on cost ~100 us per wait), then every
/// `device_poll`.
inline constexpr auto device_spin = std::chrono::microseconds{2000};
inline constexpr auto device_poll = std::chrono::microseconds{50};

} // namespace hvactor::knobs
