#pragma once
// The process's runtime (hvactor.init()) and what a worker's Python call
// needs first, shared by the executor and the trainer bindings.
#include "hvactor/runtime.hpp"

namespace hvactor::python {

/// The runtime hvactor.init() started; std::logic_error before it.
runtime& runtime_of_process();

/// In a worker: os.environ gets the variables the node set after the
/// interpreter started (HOROVOD_RANK, ...; C's getenv sees them already).
/// The caller holds the GIL.
void refresh_environ();

} // namespace hvactor::python
