#pragma once

// Internal: well-formed UTF-8, for text that leaves the process in formats
// that require it (the timeline's JSON, the dashboard's board, /metrics).

#include <cstddef>
#include <string_view>

namespace hvactor::utf8 {

/// True for a continuation byte (10xxxxxx): no character starts there.
inline bool continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

/// Length of the well-formed UTF-8 sequence at s[i] (1 for ASCII), 0 when
/// there is none: a stray or truncated byte, an overlong form, a surrogate
/// or a code point past U+10FFFF.
inline size_t sequence_length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80)
    return 1;
  size_t n = c >= 0xC2 && c <= 0xDF   ? 2
             : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4
                                      : 0;
  if (n == 0 || i + n > s.size())
    return 0;
  auto c1 = static_cast<unsigned char>(s[i + 1]);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90)
      || (c == 0xF4 && c1 > 0x8F))
    return 0;
  for (size_t k = 1; k < n; ++k)
    if (!continuation(static_cast<unsigned char>(s[i + k])))
      return 0;
  return n;
}

} // namespace hvactor::utf8
