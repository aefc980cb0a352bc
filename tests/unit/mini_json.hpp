#pragma once

// A strict JSON parser for tests (RFC 8259: no trailing commas, no
// comments, escapes checked, strings must be UTF-8), so that tests can
// check files hvactor writes without a JSON dependency. Throws
// std::runtime_error naming the offset of the first error.

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hvactor::test {

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<json> items;
  std::map<std::string, json> members;

  /// The member `key`, or nullptr (also when this is not an object).
  const json* find(const std::string& key) const {
    auto i = members.find(key);
    return i == members.end() ? nullptr : &i->second;
  }
  /// The string member `key`, or "".
  std::string str(const std::string& key) const {
    auto* v = find(key);
    return v && v->type == kind::string ? v->string : std::string{};
  }
  /// The number member `key`, or -1.
  double num(const std::string& key) const {
    auto* v = find(key);
    return v && v->type == kind::number ? v->number : -1;
  }

  static json parse(std::string_view text) {
    parser p{text};
    p.space();
    json out = p.value(0);
    p.space();
    if (p.at != text.size())
      p.fail("text after the value");
    return out;
  }

private:
  struct parser {
    std::string_view s;
    size_t at = 0;

    [[noreturn]] void fail(const std::string& what) const {
      throw std::runtime_error("invalid JSON at offset " + std::to_string(at) + ": " + what);
    }
    void space() {
      while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t'))
        ++at;
    }
    char peek() const {
      return at < s.size() ? s[at] : '\0';
    }
    void expect(char c) {
      if (peek() != c)
        fail(std::string{"expected '"} + c + "'");
      ++at;
    }
    void word(std::string_view w) {
      if (s.substr(at, w.size()) != w)
        fail("expected " + std::string{w});
      at += w.size();
    }
    json value(int depth) {
      if (depth > 64)
        fail("nested too deeply");
      json v;
      switch (peek()) {
        case '{':
          v.type = kind::object;
          ++at;
          space();
          if (peek() == '}') {
            ++at;
            return v;
          }
          for (;;) {
            space();
            auto key = string_body();
            space();
            expect(':');
            space();
            v.members[key] = value(depth + 1);
            space();
            if (peek() == ',') {
              ++at;
              continue;
            }
            expect('}');
            return v;
          }
        case '[':
          v.type = kind::array;
          ++at;
          space();
          if (peek() == ']') {
            ++at;
            return v;
          }
          for (;;) {
            space();
            v.items.push_back(value(depth + 1));
            space();
            if (peek() == ',') {
              ++at;
              continue;
            }
            expect(']');
            return v;
          }
        case '"':
          v.type = kind::string;
          v.string = string_body();
          return v;
        case 't':
          word("true");
          v.type = kind::boolean;
          v.boolean = true;
          return v;
        case 'f':
          word("false");
          v.type = kind::boolean;
          return v;
        case 'n':
          word("null");
          return v;
        default:
          v.type = kind::number;
          v.number = number();
          return v;
      }
    }
    double number() {
      size_t start = at;
      if (peek() == '-')
        ++at;
      if (peek() == '0')
        ++at;
      else if (peek() >= '1' && peek() <= '9')
        digits();
      else
        fail("expected a value");
      if (peek() == '.') {
        ++at;
        digits();
      }
      if (peek() == 'e' || peek() == 'E') {
        ++at;
        if (peek() == '+' || peek() == '-')
          ++at;
        digits();
      }
      return std::stod(std::string{s.substr(start, at - start)});
    }
    void digits() {
      if (!(peek() >= '0' && peek() <= '9'))
        fail("expected a digit");
      while (peek() >= '0' && peek() <= '9')
        ++at;
    }
    unsigned hex4() {
      unsigned v = 0;
      for (int i = 0; i < 4; ++i, ++at) {
        char c = peek();
        v *= 16;
        if (c >= '0' && c <= '9')
          v += static_cast<unsigned>(c - '0');
        else if (c >= 'a' && c <= 'f')
          v += static_cast<unsigned>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
          v += static_cast<unsigned>(c - 'A' + 10);
        else
          fail("bad \\u escape");
      }
      return v;
    }
    static void put_utf8(std::string& out, unsigned cp) {
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    // One UTF-8 character starting at `at`, checked, appended to `out`.
    void utf8_char(std::string& out) {
      auto c = static_cast<unsigned char>(s[at]);
      size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                              : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
      if (n == 0 || at + n > s.size())
        fail("invalid UTF-8");
      auto c1 = static_cast<unsigned char>(s[at + 1]);
      if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90)
          || (c == 0xF4 && c1 > 0x8F))
        fail("invalid UTF-8");
      for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[at + k]) & 0xC0) != 0x80)
          fail("invalid UTF-8");
      out.append(s.substr(at, n));
      at += n;
    }
    std::string string_body() {
      expect('"');
      std::string out;
      for (;;) {
        if (at >= s.size())
          fail("unterminated string");
        auto c = static_cast<unsigned char>(s[at]);
        if (c == '"') {
          ++at;
          return out;
        }
        if (c < 0x20)
          fail("raw control character in a string");
        if (c >= 0x80) {
          utf8_char(out);
          continue;
        }
        ++at;
        if (c != '\\') {
          out += static_cast<char>(c);
          continue;
        }
        char e = peek();
        ++at;
        switch (e) {
          case '"':
          case '\\':
          case '/':
            out += e;
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            unsigned cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              word("\\u");
              unsigned lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF)
                fail("unpaired surrogate");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              fail("unpaired surrogate");
            }
            put_utf8(out, cp);
            break;
          }
          default:
            --at;
            fail("bad escape");
        }
      }
    }
  };
};

} // namespace hvactor::test
