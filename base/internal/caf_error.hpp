#pragma once

// Internal: hvactor errors as they travel inside caf::error, and back.
//
// Inside the runtime every failure is a caf::error in hvactor's category:
// code = error_kind (never 0, which CAF reads as "no error"), context =
// (message, rank). At the API edge throw_caf_error turns it back into the
// exception class of its kind (errors.hpp).

#include <cstdint>
#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>

#include "hvactor/errors.hpp"

namespace hvactor {

/// Error category of hvactor errors carried as caf::error.
inline constexpr caf::atom_value error_category = caf::atom("hvactor");

/// A caf::error of `kind` carrying `message` and the world rank involved
/// (-1: none). Never empty.
caf::error make_error(error_kind kind, std::string message, int32_t rank = -1);

/// The message of an hvactor error carried in `err`, or CAF's rendering of
/// any other error ("request_timeout", ...). Never empty for a non-empty err.
std::string describe(const caf::error& err);

/// Throws the exception class of the hvactor error in `err` (placement_timeout,
/// worker_error, ...), or hvactor::error with `context` and CAF's text for
/// any other error. `err` must not be empty: an empty error is a bug, thrown
/// as hvactor::error naming `context`.
[[noreturn]] void throw_caf_error(const caf::error& err, const std::string& context);

/// Registers the hvactor error category's renderer with `cfg`.
void register_error_category(caf::actor_system_config& cfg);

} // namespace hvactor
