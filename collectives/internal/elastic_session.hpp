#pragma once

// Internal: a worker's side of an elastic job's generations, kept across
// hvd::init/shutdown. The driver writes into the rendezvous store's scope
// "<job>/elastic":
//   assign/<worker>/<gen>  "rank size local_rank local_size cross_rank
//                           cross_size" or "removed"
//   latest/<worker>        the newest generation assigned to the worker
//   changed/<gen>          host_update flags: the hosts changed while <gen>
//                          was the world (rank 0 watches it)
// and the worker writes:
//   joined/<gen>/<worker>  its collectives of <gen> connected
//   reset/<gen>            its collectives of <gen> failed (asks for a new
//                          generation; the text says why)

#include <chrono>
#include <string>

namespace hvactor::hvd::elastic::detail {

/// HOROVOD_ELASTIC=1 and HVACTOR_ELASTIC_WORKER are set.
bool enabled();

/// Waits for this worker's next assignment (skipping to the newest one),
/// puts it into the environment (HOROVOD_RANK.., HVACTOR_RENDEZVOUS_SCOPE)
/// and returns its generation. A worker removed from the job leaves the
/// process (exit 0). Throws rendezvous_timeout when none comes within
/// HVACTOR_ELASTIC_WAIT_MS.
int take_assignment();

/// The collectives of `gen` connected as `rank`: tells the driver; rank 0
/// starts watching for host changes.
void joined(int gen, int rank);

/// The collectives of generation `gen` failed: asks the driver for a new
/// one (it also learns of dead workers by itself).
void request_reset(int gen, const std::string& why);

/// hvd::shutdown: stops watching.
void left();

/// Rank 0's pending host_update flags (0: none); clears them.
int take_update();

} // namespace hvactor::hvd::elastic::detail
