#pragma once

// Internal: little-endian byte strings for hvactor::train's data that
// travels as raw bytes (dataset shards, checkpoint streams, metrics). The
// reader checks every length against what is left, so malformed input is
// an hvactor::error, never an overread or a huge allocation.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "hvactor/errors.hpp"

namespace hvactor {

class byte_writer {
public:
  void raw(const char* data, size_t n) {
    out_.insert(out_.end(), data, data + n);
  }
  void u8(uint8_t x) {
    out_.push_back(static_cast<char>(x));
  }
  void u32(uint32_t x) {
    fixed(x);
  }
  void u64(uint64_t x) {
    fixed(x);
  }
  void f64(double x) {
    fixed(x);
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  /// Appends `n` bytes to fill in place; returns where they start.
  char* grow(size_t n) {
    auto at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }
  size_t size() const noexcept {
    return out_.size();
  }
  std::vector<char> take() {
    return std::move(out_);
  }

private:
  template <class T>
  void fixed(T x) {
    char buf[sizeof(T)];
    std::memcpy(buf, &x, sizeof(T));
    raw(buf, sizeof(T));
  }
  std::vector<char> out_;
};

class byte_reader {
public:
  /// `what` names the input in errors ("a dataset shard").
  byte_reader(const std::vector<char>& in, std::string what)
      : in_(in.data(), in.size()), what_(std::move(what)) {
  }
  byte_reader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {
  }
  std::string_view raw(uint64_t n) {
    if (n > in_.size() - pos_)
      throw error(what_ + ": truncated (" + std::to_string(n) + " bytes wanted, "
                  + std::to_string(in_.size() - pos_) + " left)");
    std::string_view out{in_.data() + pos_, static_cast<size_t>(n)};
    pos_ += static_cast<size_t>(n);
    return out;
  }
  uint8_t u8() {
    return static_cast<uint8_t>(raw(1)[0]);
  }
  uint32_t u32() {
    return fixed<uint32_t>();
  }
  uint64_t u64() {
    return fixed<uint64_t>();
  }
  double f64() {
    return fixed<double>();
  }
  std::string str() {
    auto n = u32();
    return std::string{raw(n)};
  }
  bool at_end() const noexcept {
    return pos_ == in_.size();
  }
  /// Bytes read so far.
  size_t position() const noexcept {
    return pos_;
  }
  size_t left() const noexcept {
    return in_.size() - pos_;
  }
  void expect_end() const {
    if (!at_end())
      throw error(what_ + ": " + std::to_string(in_.size() - pos_) + " bytes after the end");
  }

private:
  template <class T>
  T fixed() {
    auto s = raw(sizeof(T));
    T x;
    std::memcpy(&x, s.data(), sizeof(T));
    return x;
  }
  std::string_view in_;
  size_t pos_ = 0;
  std::string what_;
};

} // namespace hvactor
