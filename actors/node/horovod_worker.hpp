#pragma once

namespace hvactor {

/// True in a process that a node_colocator started as a worker (the
/// HVACTOR_WORKER_* variables are set).
bool is_worker_process();

/// Turns this process into a worker: connects to the coordinator named in
/// the environment, registers, runs the calls it is sent and ends the
/// process when the job ends or the driver goes away. Never returns.
[[noreturn]] void serve_worker();

} // namespace hvactor
