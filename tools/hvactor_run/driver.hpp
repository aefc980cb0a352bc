#pragma once

// hvactor-run --driver: the program runs once, as an executor-API driver of
// the cluster hvactor-run brought up, instead of -np copies of it.

#include <atomic>
#include <string>

#include "hvactor/tls.hpp"
#include "driver/internal/launcher.hpp"

namespace hvactor::run_tool {

/// Runs o.program once with HVACTOR_ADDRESS=`address` (and the TLS identity
/// `tls` as HVACTOR_TLS_*) set, its output straight to ours; SIGTERM/SIGINT
/// (`stop`) are passed on. Returns its exit code (128 + signal when
/// killed).
int run_driver(const launch_options& o, const std::string& address, const tls::config& tls,
               stop_request& stop);

} // namespace hvactor::run_tool
