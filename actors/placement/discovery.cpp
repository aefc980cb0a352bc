#include "hvactor/discovery.hpp"

#include <charconv>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hvactor/errors.hpp"
#include "hvactor/settings.hpp"
#include "actors/placement/discovery_script.hpp"

#include "base/internal/knobs_elastic.hpp"

namespace hvactor {

namespace {

/// One run of a discovery script may take this long (knobs_elastic.hpp).
constexpr std::chrono::milliseconds script_limit = knobs::discovery_script_limit;

/// Longest piece of a malformed line quoted in a message.
constexpr size_t max_quoted = 120;

/// `text` for a message: control bytes escaped, long lines cut.
std::string escaped(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, max_quoted)) {
    if (c < 0x20 || c == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > max_quoted)
    out += "...";
  return out;
}

std::string trimmed(const std::string& text) {
  constexpr const char* space = " \t\r";
  auto first = text.find_first_not_of(space);
  if (first == std::string::npos)
    return {};
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

/// Slots in 0..65535 from digits only; false otherwise.
bool parse_slots(const std::string& text, int& slots) {
  if (text.empty() || text.size() > 5)
    return false;
  for (char c : text)
    if (c < '0' || c > '9')
      return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), slots);
  return ec == std::errc{} && end == text.data() + text.size() && slots <= 65535;
}

} // namespace

std::vector<host_slots> parse_host_slots(const std::string& text, int default_slots) {
  std::vector<host_slots> hosts;
  std::set<std::string> seen;
  size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    auto end = text.find('\n', start);
    auto raw = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    auto line = trimmed(raw);
    if (line.empty() || line.front() == '#')
      continue;
    auto fail = [&](const std::string& why) {
      throw std::invalid_argument("host discovery output line " + std::to_string(line_no) + " '"
                                  + escaped(raw) + "': " + why);
    };
    host_slots entry;
    entry.slots = default_slots;
    auto colon = line.find(':');
    entry.host = trimmed(line.substr(0, colon));
    if (colon != std::string::npos
        && !parse_slots(trimmed(line.substr(colon + 1)), entry.slots))
      fail("slots must be an integer in 0..65535 (\"node-id:slots\" or \"node-id\").");
    try {
      validate_node_id(entry.host);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
    if (!seen.insert(entry.host).second)
      fail("host '" + entry.host + "' is listed twice.");
    if (entry.slots > 0)
      hosts.push_back(std::move(entry));
  }
  return hosts;
}

discovery discovery::script(std::string path, int default_slots) {
  if (default_slots < 1 || default_slots > 65535)
    throw std::invalid_argument("slots per host must be in 1..65535 (got "
                                + std::to_string(default_slots) + ")");
  discovery d;
  d.what_ = "script " + path;
  d.find_ = [path = std::move(path), default_slots] {
    return run_discovery_script(path, script_limit, default_slots);
  };
  return d;
}

discovery discovery::function(function_type fn) {
  if (!fn)
    throw std::invalid_argument("discovery::function needs a callable: Got an empty function.");
  discovery d;
  d.what_ = "a function";
  d.find_ = [fn = std::move(fn)] {
    auto found = fn();
    std::vector<host_slots> hosts;
    std::set<std::string> seen;
    for (auto& h : found) {
      try {
        validate_node_id(h.host);
      } catch (const std::invalid_argument& e) {
        throw error(std::string{"host discovery function returned a bad host: "} + e.what());
      }
      if (h.slots < 0 || h.slots > 65535)
        throw error("host discovery function returned " + std::to_string(h.slots)
                    + " slots for host '" + h.host + "': slots must be in 0..65535.");
      if (!seen.insert(h.host).second)
        throw error("host discovery function returned host '" + h.host + "' twice.");
      if (h.slots > 0)
        hosts.push_back(std::move(h));
    }
    return hosts;
  };
  return d;
}

std::vector<host_slots> discovery::find() const {
  if (!find_)
    throw error("discovery::find() called on the cluster default: the coordinator resolves the "
                "cluster's live nodes from its registry.");
  return find_();
}

std::string discovery::describe() const {
  return find_ ? what_ : "the cluster's live nodes";
}

} // namespace hvactor
