#pragma once

#include <map>
#include <string>

/// Structured events from worker processes to the driver (the ray_logger
/// equivalent): `hvactor::log::event({{"epoch", "3"}, {"loss", "0.25"}})`
/// in any worker reaches the executor's event callback and hvactor-run's
/// output, in arrival order, tagged with the rank.
namespace hvactor::log {

/// Key/value pairs of one event.
using fields = std::map<std::string, std::string>;

/// Prefix of the stderr line that carries an event (its node forwards it
/// instead of printing it).
inline constexpr const char* event_marker = "\x1ehvactor-event\t";

/// Emits one event (one atomic line on stderr). Outside a job the line is
/// simply printed.
void event(const fields& kv);

/// The line after the marker: key=value pairs, tab-separated, with tab,
/// newline, '=' and backslash escaped.
std::string encode_event(const fields& kv);

/// The inverse of encode_event (malformed pairs are skipped).
fields decode_event(const std::string& text);

} // namespace hvactor::log
