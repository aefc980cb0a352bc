#pragma once

// hvactor-bench control-plane: start() time, call rate and call latency.

#include <string>
#include <vector>

#include <hvactor/runtime.hpp>

namespace hvactor::bench_tool {

/// Runs the subcommand with hvactor-bench's arguments (`args[1]` is
/// "control-plane"); prints the table; returns the exit code.
int run_control_plane(hvactor::runtime& rt, const std::vector<std::string>& args);

/// `hvactor-bench __peer-caf`: the peer's echo actor, published on
/// 127.0.0.1 (its port printed on stdout) until stdin closes.
[[noreturn]] void serve_caf_echo();

} // namespace hvactor::bench_tool
