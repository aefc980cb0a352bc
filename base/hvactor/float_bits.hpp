#pragma once

// Floating-point values that cross CAF exactly.
//
// CAF 0.17's binary format converts every float and double with
// detail::pack754, which never returns for an infinity (it halves it until
// it is below 2), turns NaN into 1 or -1, -0.0 into 0.0 and subnormals into
// huge numbers. A process that serializes an infinity hangs for good. The
// adapters below wrap a CAF (de)serializer and write floats and doubles as
// their IEEE-754 bit patterns instead (long double as a hexadecimal text),
// so that infinities, NaNs (payload and sign), -0.0 and subnormals arrive as
// they left; every other value is written exactly as the wrapped one
// writes it.
//
// Two places use them: detail::pack/unpack (the arguments and results of
// executor calls, elastic state, hvd's objects), and message structs whose
// inspect wraps a member that holds floating-point values in
// detail::exact(x.member) (BASP serializes those with CAF's own format).

#include <bit>
#include <charconv>
#include <cstdint>
#include <string>

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

namespace hvactor::detail {

/// Writes through `inner`, floats and doubles as their bit patterns.
class float_bits_serializer final : public caf::serializer {
public:
  explicit float_bits_serializer(caf::serializer& inner)
      : caf::serializer(inner.context()), inner_(inner) {
  }

  caf::error begin_object(uint16_t& nr, std::string& name) override {
    return inner_.begin_object(nr, name);
  }
  caf::error end_object() override {
    return inner_.end_object();
  }
  caf::error begin_sequence(size_t& n) override {
    return inner_.begin_sequence(n);
  }
  caf::error end_sequence() override {
    return inner_.end_sequence();
  }
  caf::error apply_raw(size_t num_bytes, void* data) override {
    return inner_.apply_raw(num_bytes, data);
  }

protected:
  caf::error apply_impl(int8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_.apply(x); }

  caf::error apply_impl(float& x) override {
    auto bits = std::bit_cast<uint32_t>(x);
    return inner_.apply(bits);
  }
  caf::error apply_impl(double& x) override {
    auto bits = std::bit_cast<uint64_t>(x);
    return inner_.apply(bits);
  }
  caf::error apply_impl(long double& x) override {
    // Hexadecimal: exact for every finite value; "inf", "-inf", "nan".
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::hex);
    std::string text{buf, res.ptr};
    return inner_.apply(text);
  }

private:
  caf::serializer& inner_;
};

/// Reads through `inner` what float_bits_serializer wrote.
class float_bits_deserializer final : public caf::deserializer {
public:
  explicit float_bits_deserializer(caf::deserializer& inner)
      : caf::deserializer(inner.context()), inner_(inner) {
  }

  caf::error begin_object(uint16_t& nr, std::string& name) override {
    return inner_.begin_object(nr, name);
  }
  caf::error end_object() override {
    return inner_.end_object();
  }
  caf::error begin_sequence(size_t& n) override {
    return inner_.begin_sequence(n);
  }
  caf::error end_sequence() override {
    return inner_.end_sequence();
  }
  caf::error apply_raw(size_t num_bytes, void* data) override {
    return inner_.apply_raw(num_bytes, data);
  }

protected:
  caf::error apply_impl(int8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_.apply(x); }

  caf::error apply_impl(float& x) override {
    uint32_t bits = 0;
    auto err = inner_.apply(bits);
    x = std::bit_cast<float>(bits);
    return err;
  }
  caf::error apply_impl(double& x) override {
    uint64_t bits = 0;
    auto err = inner_.apply(bits);
    x = std::bit_cast<double>(bits);
    return err;
  }
  caf::error apply_impl(long double& x) override {
    std::string text;
    if (auto err = inner_.apply(text))
      return err;
    auto end = text.data() + text.size();
    auto res = std::from_chars(text.data(), end, x, std::chars_format::hex);
    if (text.empty() || res.ec != std::errc{} || res.ptr != end)
      return caf::make_error(caf::sec::invalid_argument, "not a long double: '" + text + "'");
    return caf::none;
  }

private:
  caf::deserializer& inner_;
};

/// A member of a message struct whose floating-point values (a double, a
/// vector of them, a struct holding some, ...) travel exactly:
/// `f(meta::type_name("x"), x.id, detail::exact(x.value))`.
template <class T>
struct exact_ref {
  T& value;
};

template <class T>
exact_ref<T> exact(T& x) {
  return {x};
}

template <class T>
caf::error inspect(caf::serializer& f, exact_ref<T>& x) {
  float_bits_serializer sink{f};
  return sink(x.value);
}

template <class T>
caf::error inspect(caf::deserializer& f, exact_ref<T>& x) {
  float_bits_deserializer source{f};
  return source(x.value);
}

/// Any other inspector (to_string) sees the value itself.
template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, exact_ref<T>& x) {
  return f(x.value);
}

} // namespace hvactor::detail
