#pragma once

// The address hvactor-run's head listens on inside a Slurm allocation: one
// the nodes can reach, chosen in bounded time however many nodes there are.

#include <chrono>
#include <string>
#include <vector>

namespace hvactor::cluster {

/// An address and why it was chosen (printed to the user).
struct head_address {
  std::string address;
  std::string why;
};

/// `given` (--bind) when set; else the local address that reaches one of
/// the first 3 of `nodes`, else the address of this host's name. The names
/// are resolved in parallel and the choice takes at most `limit`. Throws
/// hvactor::error naming the names tried and saying to pass --bind when
/// none resolves in time.
head_address choose_head_address(const std::vector<std::string>& nodes, const std::string& given,
                                 std::chrono::seconds limit);

} // namespace hvactor::cluster
