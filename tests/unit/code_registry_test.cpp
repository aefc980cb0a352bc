// The code registry in one process: calls built as the driver builds them
// (make_free_call, make_object_call, ctor_invoker) are found by name and run
// as a worker runs them; code addresses and values round-trip.

#include <hvactor/code_registry.hpp>
#include <hvactor/executor.hpp>
#include <hvactor/serialization.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

#include <doctest/doctest.h>

namespace detail = hvactor::detail;

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// What a worker holds between calls: its executable object, if any.
struct fake_worker {
  detail::executable_slot exe;

  /// Runs `call` as the worker does and returns the packed result.
  std::vector<char> call(const detail::call_data& call) {
    auto invoke = detail::find_invoker(call.invoker);
    REQUIRE_MESSAGE(bool(invoke), "no invoker registered as ", call.invoker);
    detail::call_context ctx{exe, call.target, call.args, {}};
    invoke(ctx);
    return ctx.result;
  }

  /// Constructs T(args...) as start<T>(args...) does.
  template <class T, class... Args>
  void start(Args... args) {
    call({detail::ctor_invoker<T, Args...>::key, "",
          detail::pack_args(detail::type_list<Args...>{}, args...)});
  }

  /// The message of the hvactor::error running `call` throws.
  std::string error_of(const detail::call_data& call) {
    try {
      this->call(call);
    } catch (const hvactor::error& e) {
      return e.what();
    }
    FAIL("the call did not throw hvactor::error");
    return {};
  }
};

template <class R>
R unpacked(const std::vector<char>& buf) {
  return std::get<0>(detail::unpack<R>(buf));
}

/// A user type travelling as argument and result (CAF 0.17 inspect).
struct sample {
  int rank = 0;
  std::vector<double> values;
  std::string tag;

  friend bool operator==(const sample&, const sample&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sample& x) {
  return f(caf::meta::type_name("sample"), x.rank, x.values, x.tag);
}

int add(int a, int b) {
  return a + b;
}

int calls_of_touch = 0;

void touch() {
  ++calls_of_touch;
}

std::string greet(std::string name) {
  return "hello, " + name;
}

size_t length_of(const std::string& s) {
  return s.size();
}

double sum(std::vector<double> xs) {
  return std::accumulate(xs.begin(), xs.end(), 0.0);
}

sample relabel(sample in, std::string tag) {
  in.tag = tag;
  in.values.push_back(in.rank * 0.5);
  return in;
}

double half(double x) {
  return x / 2;
}

/// An executable object, as start<counter>(10, "c") builds it.
class counter {
public:
  counter(int start, std::string name) : value_(start), name_(std::move(name)) {
  }
  int value() const {
    return value_;
  }
  int add(int n) {
    return value_ += n;
  }
  void reset() {
    value_ = 0;
  }
  std::string describe(const std::string& prefix, int times) const {
    return prefix + name_ + "=" + std::to_string(value_ * times);
  }

private:
  int value_;
  std::string name_;
};

struct shape {
  virtual ~shape() = default;
  virtual std::string kind() const {
    return "shape";
  }
  virtual int corners(int per_side) const {
    return 0 * per_side;
  }
};

struct square : shape {
  std::string kind() const override {
    return "square";
  }
  int corners(int per_side) const override {
    return 4 * per_side;
  }
};

/// Data, not code: its offset must not decode as a function.
int not_code[4] = {1, 2, 3, 4};

} // namespace

TEST_SUITE("code_registry") {

TEST_CASE("a plain function call round-trips to its result") {
  auto call = detail::make_free_call(&add, 2, 3);
  CHECK(starts_with(call.target, "<main>+0x"));
  fake_worker w;
  CHECK(unpacked<int>(w.call(call)) == 5);
}

TEST_CASE("a captureless lambda call round-trips to its result") {
  auto call = detail::make_free_call([](int x) { return x * x; }, 7);
  fake_worker w;
  CHECK(unpacked<int>(w.call(call)) == 49);
}

TEST_CASE("a void function runs and returns an empty result") {
  calls_of_touch = 0;
  fake_worker w;
  CHECK(w.call(detail::make_free_call(&touch)).empty());
  CHECK(calls_of_touch == 1);
}

TEST_CASE("strings, vectors and const references travel as arguments") {
  fake_worker w;
  CHECK(unpacked<std::string>(w.call(detail::make_free_call(&greet, "ray"))) == "hello, ray");
  CHECK(unpacked<size_t>(w.call(detail::make_free_call(&length_of, std::string{"abcd"}))) == 4);
  std::vector<double> xs{0.5, 1.5, 2.0};
  CHECK(unpacked<double>(w.call(detail::make_free_call(&sum, xs))) == 4.0);
  CHECK(unpacked<double>(w.call(detail::make_free_call(&sum, std::vector<double>{}))) == 0.0);
}

TEST_CASE("a user struct with inspect travels as argument and result") {
  fake_worker w;
  sample in{3, {1.0}, "old"};
  auto out = unpacked<sample>(w.call(detail::make_free_call(&relabel, in, "new")));
  CHECK(out == sample{3, {1.0, 1.5}, "new"});
}

TEST_CASE("an int argument is converted to a double parameter") {
  fake_worker w;
  CHECK(unpacked<double>(w.call(detail::make_free_call(&half, 3))) == 1.5);
}

TEST_CASE("decode_all unpacks every payload in order") {
  std::vector<std::vector<char>> payloads;
  for (int rank = 0; rank < 4; ++rank) {
    int value = rank * 10;
    payloads.push_back(detail::pack(value));
  }
  CHECK(detail::decode_all<int>(payloads) == std::vector<int>{0, 10, 20, 30});
  CHECK(detail::decode_all<int>({}).empty());
}

TEST_CASE("an object built by ctor_invoker answers member calls and keeps its state") {
  fake_worker w;
  w.start<counter, int, std::string>(10, "c");
  REQUIRE(w.exe.object != nullptr);
  CHECK(w.exe.type == typeid(counter).name());
  CHECK(unpacked<int>(w.call(detail::make_object_call(&counter::value))) == 10);
  CHECK(unpacked<int>(w.call(detail::make_object_call(&counter::add, 5))) == 15);
  CHECK(unpacked<int>(w.call(detail::make_object_call(&counter::value))) == 15);
  CHECK(unpacked<std::string>(w.call(detail::make_object_call(&counter::describe, "n:", 2)))
        == "n:c=30");
  CHECK(w.call(detail::make_object_call(&counter::reset)).empty());
  CHECK(unpacked<int>(w.call(detail::make_object_call(&counter::value))) == 0);
}

TEST_CASE("a lambda taking the object first runs on the worker's object") {
  fake_worker w;
  w.start<counter, int, std::string>(4, "c");
  auto times = [](counter& c, int k) { return c.value() * k; };
  CHECK(unpacked<int>(w.call(detail::make_object_call(times, 3))) == 12);
  auto bump = [](counter& c) { c.add(1); };
  CHECK(w.call(detail::make_object_call(bump)).empty());
  auto read = [](const counter& c) { return c.value(); };
  CHECK(unpacked<int>(w.call(detail::make_object_call(read))) == 5);
}

TEST_CASE("a virtual member encodes as a vtable offset and dispatches to the override") {
  CHECK(starts_with(detail::encode_member(&shape::kind), "V"));
  CHECK(starts_with(detail::encode_member(&counter::value), "M"));
  fake_worker w;
  w.start<square>();
  CHECK(unpacked<std::string>(w.call(detail::make_object_call(&square::kind))) == "square");
  CHECK(unpacked<int>(w.call(detail::make_object_call(&square::corners, 2))) == 8);
}

TEST_CASE("a base-class member pointer calls the derived override") {
  // The worker's object is seen as a shape but is a square.
  fake_worker w;
  std::shared_ptr<shape> object = std::make_shared<square>();
  w.exe.object = object;
  w.exe.type = typeid(shape).name();
  CHECK(unpacked<std::string>(w.call(detail::make_object_call(&shape::kind))) == "square");
  CHECK(unpacked<int>(w.call(detail::make_object_call(&shape::corners, 3))) == 12);
}

TEST_CASE("a member pointer of a base class works on a derived executable") {
  // &square::kind inherited from shape has type R (shape::*)(): the
  // executable is found through its public base class.
  fake_worker w;
  w.start<square>();
  CHECK_NOTHROW(w.call(detail::make_object_call(&shape::kind)));
}

TEST_CASE("calling a member of another type names both types") {
  fake_worker w;
  w.start<counter, int, std::string>(1, "c");
  auto message = w.error_of(detail::make_object_call(&shape::kind));
  CHECK(contains(message, detail::type_name<counter>()));
  CHECK(contains(message, detail::type_name<shape>()));
  message = w.error_of(detail::make_object_call([](square& s) { return s.kind(); }));
  CHECK(contains(message, detail::type_name<counter>()));
  CHECK(contains(message, detail::type_name<square>()));
}

TEST_CASE("calling a member before any object exists asks for start<T>") {
  fake_worker w;
  CHECK(contains(w.error_of(detail::make_object_call(&counter::value)), "start<T>"));
  CHECK(contains(w.error_of(detail::make_object_call([](counter& c) { return c.value(); })),
                 "start<T>"));
}

TEST_CASE("an unknown invoker name is not found") {
  bool found_bogus = detail::find_invoker("free:no such signature") != nullptr;
  bool found_empty = detail::find_invoker("") != nullptr;
  CHECK_FALSE(found_bogus);
  CHECK_FALSE(found_empty);
}

TEST_CASE("a function in the test binary encodes as <main>+offset and decodes back") {
  auto addr = reinterpret_cast<const void*>(&add);
  auto encoded = detail::encode_code_address(addr);
  CHECK(starts_with(encoded, "<main>+0x"));
  CHECK(detail::decode_code_address(encoded) == addr);
  // Twice: the caches must agree with the first answer.
  CHECK(detail::encode_code_address(addr) == encoded);
  CHECK(detail::decode_code_address(encoded) == addr);
}

TEST_CASE("a function in libhvactor_base encodes with the library's name") {
  // The test binary is PIE, so this is the function itself, not a PLT stub.
  auto addr = reinterpret_cast<const void*>(&detail::find_invoker);
  auto encoded = detail::encode_code_address(addr);
  INFO("encoded: ", encoded);
  CHECK(starts_with(encoded, "libhvactor_base.so"));
  CHECK(contains(encoded, "+0x"));
  CHECK(detail::decode_code_address(encoded) == addr);
}

TEST_CASE("a module whose name contains '+' (libstdc++) round-trips") {
  auto addr = reinterpret_cast<const void*>(&std::get_terminate);
  auto encoded = detail::encode_code_address(addr);
  INFO("encoded: ", encoded);
  CHECK(starts_with(encoded, "libstdc++.so"));
  CHECK(detail::decode_code_address(encoded) == addr);
}

TEST_CASE("encoding an address outside every module throws hvactor::error") {
  int on_stack = 0;
  CHECK_THROWS_AS(detail::encode_code_address(&on_stack), hvactor::error);
  CHECK_THROWS_AS(detail::encode_code_address(&not_code[0]), hvactor::error);
}

TEST_CASE("decoding a reference without a module separator throws hvactor::error") {
  CHECK_THROWS_AS(detail::decode_code_address("no separator"), hvactor::error);
  CHECK_THROWS_AS(detail::decode_code_address(""), hvactor::error);
}

TEST_CASE("decoding a reference with a malformed offset throws hvactor::error") {
  CHECK_THROWS_AS(detail::decode_code_address("<main>+xyz"), hvactor::error);
  CHECK_THROWS_AS(detail::decode_code_address("<main>+"), hvactor::error);
}

TEST_CASE("decoding a reference into a module that is not loaded throws hvactor::error") {
  CHECK_THROWS_WITH_AS(detail::decode_code_address("libnot_here.so.3+0x1040"),
                       doctest::Contains("not loaded"), hvactor::error);
}

TEST_CASE("decoding an offset that is not code throws hvactor::error") {
  // The main module's base, from a function we know the offset of.
  auto fn = reinterpret_cast<uintptr_t>(&add);
  auto encoded = detail::encode_code_address(reinterpret_cast<const void*>(&add));
  auto base = fn - std::stoull(encoded.substr(encoded.find('+') + 1), nullptr, 16);
  auto data = reinterpret_cast<uintptr_t>(&not_code[0]) - base;
  char data_ref[48];
  std::snprintf(data_ref, sizeof(data_ref), "<main>+0x%llx", static_cast<unsigned long long>(data));
  CHECK_THROWS_WITH_AS(detail::decode_code_address(data_ref),
                       doctest::Contains("does not point at code"), hvactor::error);
  CHECK_THROWS_AS(detail::decode_code_address("<main>+0x7fffffffffff"), hvactor::error);
}

TEST_CASE("pack and unpack round-trip several types at once") {
  int i = -42;
  double d = 2.5;
  bool b = true;
  int64_t big = int64_t{1} << 40;
  std::string s = "tensor/grad";
  std::vector<double> v{1.0, -2.0};
  std::map<std::string, int> m{{"a", 1}, {"b", 2}};
  sample x{1, {0.25}, "x"};
  auto buf = detail::pack(i, d, b, big, s, v, m, x);
  auto [i2, d2, b2, big2, s2, v2, m2, x2]
    = detail::unpack<int, double, bool, int64_t, std::string, std::vector<double>,
                     std::map<std::string, int>, sample>(buf);
  CHECK(i2 == i);
  CHECK(d2 == d);
  CHECK(b2 == b);
  CHECK(big2 == big);
  CHECK(s2 == s);
  CHECK(v2 == v);
  CHECK(m2 == m);
  CHECK(x2 == x);
  CHECK(detail::unpack<>(std::vector<char>{}) == std::tuple<>{});
}

TEST_CASE("unpacking garbage throws hvactor::error") {
  CHECK_THROWS_AS(detail::unpack<int>(std::vector<char>{}), hvactor::error);
  // A string claiming to be far longer than the buffer.
  std::vector<char> huge{'\xff', '\xff', '\xff', '\xff', '\x0f', 'a'};
  CHECK_THROWS_AS(detail::unpack<std::string>(huge), hvactor::error);
  CHECK_THROWS_AS(detail::unpack<std::vector<double>>(huge), hvactor::error);
  int one = 1;
  CHECK_THROWS_AS(detail::unpack<sample>(detail::pack(one)), hvactor::error);
}

} // TEST_SUITE
