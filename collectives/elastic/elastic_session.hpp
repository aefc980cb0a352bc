#pragma once

// Internal: a worker's side of an elastic job's generations, kept across
// hvd::init/shutdown. The driver writes into the rendezvous store's scope
// "<job>/elastic":
//   assign/<worker>/<gen>  its place or "removed" (elastic_assignment.hpp's
//                           binary codec, shared with the driver)
//   latest/<worker>        the newest generation assigned to the worker
//   changed/<gen>          host_update flags: the hosts changed while <gen>
//                          was the world (rank 0 watches it)
// and the worker writes:
//   joined/<gen>/<worker>  its collectives of <gen> connected
//   reset/<gen>            its collectives of <gen> failed (asks for a new
//                          generation; the text says why)

#include <chrono>
#include <string>

#include "collectives/elastic/elastic_assignment.hpp"

namespace hvactor::hvd::elastic::detail {

/// HOROVOD_ELASTIC=1 and HVACTOR_ELASTIC_WORKER are set.
bool enabled();

/// A generation this worker is assigned to: its place and the rendezvous
/// scope of that generation's collectives ("<job>/<gen>").
struct taken_assignment {
  int generation = 0;
  elastic_protocol::assignment where;
  std::string scope;
};

/// Waits for this worker's next assignment (skipping to the newest one)
/// and returns it. A worker removed from the job leaves the process (exit
/// 0). Throws rendezvous_timeout when none comes within
/// HVACTOR_ELASTIC_WAIT_MS, hvactor::error when it is malformed.
taken_assignment take_assignment();

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
