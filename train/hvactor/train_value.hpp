#pragma once

// hvactor::train's values: one metric or config value, and the maps that
// report() sends and a trainer's `.config` holds (Ray's dicts).

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>

namespace hvactor::train {

// -- values: metrics and config ----------------------------------------------------

/// Selects the adapters' value conversions (value_from) by ADL.
struct value_tag {};

/// One metric or config value: an integer, a real number or a text (the
/// values of Ray's report and train_loop_config dicts).
class value {
public:
  value() = default;
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  value(T x) : v_(static_cast<int64_t>(x)) {
  }
  value(bool x) : v_(int64_t{x ? 1 : 0}) {
  }
  template <class T>
    requires std::is_floating_point_v<T>
  value(T x) : v_(static_cast<double>(x)) {
  }
  value(std::string x) : v_(std::move(x)) {
  }
  value(const char* x) : v_(std::string{x}) {
  }
  /// From any type an adapter converts (a one-element torch::Tensor with
  /// hvactor/torch.hpp).
  template <class T>
    requires requires(const T& x) {
      { value_from(x, value_tag{}) } -> std::same_as<value>;
    }
  value(const T& x) : value(value_from(x, value_tag{})) {
  }

  bool is_int() const noexcept {
    return std::holds_alternative<int64_t>(v_);
  }
  bool is_double() const noexcept {
    return std::holds_alternative<double>(v_);
  }
  bool is_string() const noexcept {
    return std::holds_alternative<std::string>(v_);
  }

  /// The integer; std::invalid_argument for a real or a text.
  int64_t as_int() const;
  /// The number (an integer converts); std::invalid_argument for a text.
  double as_double() const;
  /// The text; std::invalid_argument for a number.
  const std::string& as_string() const;
  /// As printed in progress lines: integers plainly, reals with 6
  /// significant digits, texts as they are.
  std::string to_string() const;

  const std::variant<int64_t, double, std::string>& get() const noexcept {
    return v_;
  }

  friend bool operator==(const value&, const value&) = default;

private:
  std::variant<int64_t, double, std::string> v_ = int64_t{0};
};

/// What report() sends: name -> value.
using metrics = std::map<std::string, value>;
/// The trainer's `.config`, handed to every worker's loop.
using config = std::map<std::string, value>;

} // namespace hvactor::train
