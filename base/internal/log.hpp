#pragma once

#include <string_view>

#include <fmt/format.h>

/// hvactor's own diagnostics on stderr, one whole line per call, prefixed
/// with "[hvactor <role> pid]". The level comes from HVACTOR_LOG_LEVEL
/// (error, warn, info, debug; default warn).
namespace hvactor::log {

enum class level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// True when messages of level `lvl` are printed.
bool enabled(level lvl);

/// Sets the role shown in the prefix ("driver", "worker 3", "node a").
void set_role(std::string_view role);

/// Writes one line at `lvl`.
void write(level lvl, std::string_view message);

template <class... Ts>
void error(fmt::format_string<Ts...> fstr, Ts&&... xs) {
  write(level::error, fmt::format(fstr, std::forward<Ts>(xs)...));
}

template <class... Ts>
void warn(fmt::format_string<Ts...> fstr, Ts&&... xs) {
  if (enabled(level::warn))
    write(level::warn, fmt::format(fstr, std::forward<Ts>(xs)...));
}

template <class... Ts>
void info(fmt::format_string<Ts...> fstr, Ts&&... xs) {
  if (enabled(level::info))
    write(level::info, fmt::format(fstr, std::forward<Ts>(xs)...));
}

template <class... Ts>
void debug(fmt::format_string<Ts...> fstr, Ts&&... xs) {
  if (enabled(level::debug))
    write(level::debug, fmt::format(fstr, std::forward<Ts>(xs)...));
}

} // namespace hvactor::log
