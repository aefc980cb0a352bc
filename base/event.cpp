#include "hvactor/event.hpp"

#include <unistd.h>

namespace hvactor::log {

namespace {

void escape(std::string& out, const std::string& text) {
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '=':
        out += "\\e";
        break;
      default:
        out += c;
    }
  }
}

std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    switch (text[++i]) {
      case 't':
        out += '\t';
        break;
      case 'n':
        out += '\n';
        break;
      case 'e':
        out += '=';
        break;
      default:
        out += text[i];
    }
  }
  return out;
}

} // namespace

std::string encode_event(const fields& kv) {
  std::string out;
  for (auto& [k, v] : kv) {
    if (!out.empty())
      out += '\t';
    escape(out, k);
    out += '=';
    escape(out, v);
  }
  return out;
}

fields decode_event(const std::string& text) {
  fields out;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\t', start);
    auto pair = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (auto eq = pair.find('='); eq != std::string::npos)
      out[unescape(pair.substr(0, eq))] = unescape(pair.substr(eq + 1));
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return out;
}

void event(const fields& kv) {
  std::string line = event_marker + encode_event(kv) + "\n";
  // One write: lines of concurrent threads never interleave (pipe writes up
  // to PIPE_BUF are atomic).
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

} // namespace hvactor::log
