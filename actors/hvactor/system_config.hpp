#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/error.hpp>

#include "hvactor/tls.hpp"

namespace hvactor {

/// Applies the settings every hvactor process shares: hvactor's message
/// types, the middleman, a scheduler tuned for latency (idle threads block
/// instead of polling with 50 us sleeps; notes/caf-0.17.md section 3) and
/// heartbeats, identical on every process so that a frozen peer is noticed
/// (interval 500 ms, connection timeout 2 s), and mutual TLS when `tls` is
/// enabled (validate it first: tls::validate).
void configure_system(caf::actor_system_config& cfg, size_t max_threads = 0,
                      const tls::config& tls = {});

/// Destroys `sys` (~actor_system waits for every actor) but ends the process
/// with exit code 1 if that takes longer than `limit`: a stuck actor must
/// never hang a program's or a node's exit.
void destroy_bounded(std::unique_ptr<caf::actor_system>& sys, std::chrono::seconds limit);

/// Throws the hvactor exception that `err` carries (placement_timeout,
/// worker_error, ...), or hvactor::error with `context` and CAF's text.
[[noreturn]] void throw_caf_error(const caf::error& err, const std::string& context);

/// The message of an hvactor error carried in `err`, or CAF's rendering.
std::string describe(const caf::error& err);

} // namespace hvactor
