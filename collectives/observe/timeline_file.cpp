#include "collectives/observe/timeline.hpp"
#include "base/internal/utf8.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "hvactor/errors.hpp"

// The timeline's files and text: file names, JSON escaping, merging, and
// the event's fixed-size name field. The writer is in timeline.cpp.

namespace hvactor::collectives {

namespace {

// True when `line` is one whole JSON object (braces balanced outside strings).
bool whole_object(std::string_view line) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : line) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return true;
    }
  }
  return false;
}

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && space(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && space(s.back()))
    s.remove_suffix(1);
  return s;
}

// The events of one timeline file, without the brackets; a last line cut
// short by a crash is left out.
std::string_view events_of(std::string_view text) {
  auto body = trim(text);
  if (!body.empty() && body.front() == '[')
    body.remove_prefix(1);
  body = trim(body);
  if (!body.empty() && body.back() == ']') {
    body.remove_suffix(1);
  } else if (!body.empty()) {
    auto last = body.rfind('\n');
    auto line = trim(body.substr(last == std::string_view::npos ? 0 : last + 1));
    if (!line.empty() && line.front() == ',')
      line.remove_prefix(1);
    if (!whole_object(trim(line)))
      body = last == std::string_view::npos ? std::string_view{} : body.substr(0, last);
  }
  body = trim(body);
  while (!body.empty() && body.back() == ',')
    body = trim(body.substr(0, body.size() - 1));
  return body;
}

} // namespace

void timeline_event::set_backend(const char* name) noexcept {
  std::strncpy(backend, name, sizeof(backend) - 1);
}

void timeline_event::set_operation(const operation& o) noexcept {
  op = o.kind;
  has_type = o.kind != op_kind::barrier && o.kind != op_kind::setup;
  type = o.type;
  bytes = has_type ? o.count * hvd::size_of(o.type) : 0;
  reduction = o.reduction;
  root = o.root;
  device = o.device;
  if (!o.name.empty())
    add_name(o.name);
}

void timeline_event::add_name(std::string_view name) noexcept {
  if (truncated)
    return;
  size_t limit = sizeof(names) - 1;
  size_t sep = names_length > 0 ? 1 : 0;
  if (names_length + sep + name.size() <= limit) {
    if (sep)
      names[names_length++] = ',';
    std::memcpy(names + names_length, name.data(), name.size());
    names_length = static_cast<uint16_t>(names_length + name.size());
  } else {
    // As much as fits before "...", cut at a character boundary.
    size_t room = limit - names_length >= sep + 3 ? limit - names_length - sep - 3 : 0;
    size_t take = std::min(room, name.size());
    while (take > 0 && take < name.size()
           && utf8::continuation(static_cast<unsigned char>(name[take])))
      --take;
    if (sep && take > 0)
      names[names_length++] = ',';
    std::memcpy(names + names_length, name.data(), take);
    names_length = static_cast<uint16_t>(names_length + take);
    size_t dots = std::min<size_t>(3, limit - names_length);
    std::memcpy(names + names_length, "...", dots);
    names_length = static_cast<uint16_t>(names_length + dots);
    truncated = true;
  }
  names[names_length] = '\0';
}

std::string timeline_file(const std::string& pattern, int rank) {
  static const std::string token = "{rank}";
  if (pattern.find(token) == std::string::npos)
    return rank == 0 ? pattern : fmt::format("{}.rank{}", pattern, rank);
  std::string out;
  size_t pos = 0;
  for (auto at = pattern.find(token); at != std::string::npos; at = pattern.find(token, pos)) {
    out += pattern.substr(pos, at - pos) + std::to_string(rank);
    pos = at + token.size();
  }
  return out + pattern.substr(pos);
}

std::vector<std::string> timeline_files(const std::string& pattern, int size) {
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r)
    out.push_back(timeline_file(pattern, r));
  return out;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  json_escape_to(out, s);
  return out;
}

void json_escape_to(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      if (auto n = utf8::sequence_length(s, i)) {
        out.append(s.substr(i, n));
        i += n;
      } else {
        out += "\\ufffd";
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20)
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
    ++i;
  }
}

void merge_timelines(const std::vector<std::string>& inputs, const std::string& output) {
  std::string merged = "[";
  bool first = true;
  for (auto& in : inputs) {
    std::ifstream file{in, std::ios::binary};
    if (!file)
      throw error(fmt::format("merge_timelines: cannot read {}: {}", in, std::strerror(errno)));
    std::ostringstream read;
    read << file.rdbuf();
    std::string text = read.str();
    auto events = events_of(text);
    if (events.empty())
      continue;
    merged += first ? "\n" : ",\n";
    merged += events;
    first = false;
  }
  merged += "\n]\n";
  std::ofstream out{output, std::ios::binary | std::ios::trunc};
  if (!out || !out.write(merged.data(), static_cast<std::streamsize>(merged.size())) || !out.flush())
    throw error(fmt::format("merge_timelines: cannot write {}: {}", output, std::strerror(errno)));
}
} // namespace hvactor::collectives
