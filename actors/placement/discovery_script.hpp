#pragma once

// Internal: one run of a host discovery script (discovery::script), with the
// time limit as a parameter so that tests need not wait 10 s.

#include <chrono>
#include <string>
#include <vector>

#include "hvactor/discovery.hpp"

namespace hvactor {

/// Longest stdout a discovery script may write; more is a failed poll.
inline constexpr size_t discovery_output_limit = 1 << 20;

/// Runs `path` (no shell, no arguments, stdin /dev/null) in a process group
/// of its own, waits at most `limit`, then kills the group. Always reaps the
/// child and closes its pipes before returning. Throws hvactor::error naming
/// `path` and the reason (cannot start, timed out, exit code or signal,
/// output over discovery_output_limit, malformed line) with the last lines
/// of its stderr.
std::vector<host_slots> run_discovery_script(const std::string& path,
                                             std::chrono::milliseconds limit,
                                             int default_slots = 1);

} // namespace hvactor
