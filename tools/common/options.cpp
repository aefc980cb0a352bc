#include "options.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::tool {

namespace {

bool is_option(const std::string& w) {
  // "-5" is a (negative) value, not an option.
  return w.size() > 1 && w[0] == '-' && !(w[1] >= '0' && w[1] <= '9');
}

bool carries(const std::string& word, const std::string& value) {
  if (word == value)
    return true;
  // List values ("2,x"), as cxxopts splits them.
  std::istringstream in{word};
  for (std::string item; std::getline(in, item, ',');)
    if (item == value)
      return true;
  return false;
}

// The value quoted in cxxopts' message ("Argument ‘abc’ failed to parse").
std::string quoted_value(const std::string& what) {
  const std::string open = "\u2018", close = "\u2019";
  auto a = what.find(open);
  auto b = what.find(close, a == std::string::npos ? 0 : a + open.size());
  if (a != std::string::npos && b != std::string::npos)
    return what.substr(a + open.size(), b - a - open.size());
  // Older cxxopts quote with plain apostrophes.
  a = what.find('\'');
  b = a == std::string::npos ? a : what.find('\'', a + 1);
  if (a != std::string::npos && b != std::string::npos)
    return what.substr(a + 1, b - a - 1);
  return {};
}

// Whether `written` ("--flag value", "--flag=value", "-f value") names an
// option declared as true|false.
bool boolean_option(const cxxopts::Options& parser, const std::string& written) {
  auto name = written.substr(0, written.find_first_of(" ="));
  name.erase(0, name.find_first_not_of('-'));
  for (auto& group : parser.groups())
    for (auto& o : parser.group_help(group).options)
      if (o.s == name || std::find(o.l.begin(), o.l.end(), name) != o.l.end())
        return o.is_boolean;
  return false;
}

} // namespace

std::string option_of_value(const std::vector<std::string>& words, const std::string& value) {
  std::string current;
  for (auto& w : words) {
    if (is_option(w)) {
      auto eq = w.find('=');
      if (eq != std::string::npos && carries(w.substr(eq + 1), value))
        return w.substr(0, eq) + "=" + value;
      current = eq == std::string::npos ? w : std::string{};
      continue;
    }
    if (!current.empty() && carries(w, value))
      return current + " " + value;
  }
  return {};
}

cxxopts::ParseResult parse_options(cxxopts::Options& parser, const std::string& program,
                                   std::vector<std::string> words) {
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (auto& w : words)
    argv.push_back(w.data());
  try {
    return parser.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    auto value = quoted_value(e.what());
    auto written = option_of_value(words, value);
    if (written.rfind("--np", 0) == 0)
      written.erase(0, 1); // mpirun's spelling "-np", which the tools accept and rewrite
    bool boolean = !written.empty() && boolean_option(parser, written);
    throw std::invalid_argument(fmt::format("{}: {}", written.empty() ? value : written,
                                            boolean ? "must be true or false" : "not a number"));
  }
}

} // namespace hvactor::tool
