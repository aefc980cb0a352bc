#pragma once

// Command-line parsing shared by the tools: cxxopts, with errors that name
// the option (cxxopts names only the value: "Argument 'abc' failed to parse").

#include <string>
#include <vector>

#include <cxxopts.hpp>

namespace hvactor::tool {

/// Parses `words` (argv without argv[0]) with `parser` as program `program`.
/// A value that does not convert is a std::invalid_argument naming its
/// option as written: "--reset-limit abc: not a number", "--rounds=y: not a
/// number", "--blacklist-cooldown-range a: not a number" (an item of a list
/// value), "--include-dashboard maybe: must be true or false" (an option
/// declared true|false). Other cxxopts errors pass through unchanged.
cxxopts::ParseResult parse_options(cxxopts::Options& parser, const std::string& program,
                                   std::vector<std::string> words);

/// The option a bad `value` was given to, with the value, as written in
/// `words` ("--iters abc", "--rounds=y", "-n x"), or "" when no word carries
/// it.
std::string option_of_value(const std::vector<std::string>& words, const std::string& value);

} // namespace hvactor::tool
