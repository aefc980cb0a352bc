#pragma once

// Finding user code by a stable name in every process of a job.
//
// Workers run the driver's own binary, so a function is identified by the
// loaded module that contains it and its offset there ("<main>+0x1a2b"),
// stable under ASLR. What to do with it (argument and result types, whether
// it needs the worker's executable object) is an *invoker*: a template
// instantiated at the call site, which registers itself under a name built
// from the types when the program starts. The same instantiation exists in
// the worker, so no registration is needed at the call site.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "hvactor/serialization.hpp"

namespace hvactor::detail {

/// The worker's executable object (start<T>), possibly empty.
struct executable_slot {
  std::shared_ptr<void> object;
  /// typeid(T).name() of `object`.
  std::string type;
  /// Throws the object as a T*, so that a catch clause of any public base
  /// class converts it (member functions inherited from a base class).
  void (*throw_as_pointer)(void*) = nullptr;
};

/// The readable (demangled) name of `mangled`.
std::string demangle(const char* mangled);

/// The readable name of T.
template <class T>
std::string type_name() {
  return demangle(typeid(T).name());
}

/// What an invoker sees of the worker.
struct call_context {
  executable_slot& executable;
  const std::string& target;
  const std::vector<char>& args;
  std::vector<char> result;
};

using invoker_fn = void (*)(call_context&);

/// Adds an invoker under `key`; returns `key`.
std::string register_invoker(std::string key, invoker_fn fn);

/// The invoker registered under `key`, or nullptr.
invoker_fn find_invoker(const std::string& key);

/// "<module>+0x<offset>" for a function address; throws hvactor::error if
/// the address is not in a loaded module.
std::string encode_code_address(const void* addr);

/// Reverses encode_code_address in this process; throws hvactor::error when
/// the module is not loaded or the address is not executable code there.
const void* decode_code_address(const std::string& target);

/// Encodes a pointer to member function (Itanium C++ ABI layout).
template <class Pmf>
std::string encode_member(Pmf pmf) {
  static_assert(sizeof(Pmf) == 2 * sizeof(void*), "unsupported member function pointer layout");
  struct {
    uintptr_t ptr;
    ptrdiff_t adj;
  } raw;
  std::memcpy(&raw, &pmf, sizeof(raw));
  if (raw.ptr & 1) // virtual: an offset into the vtable
    return "V" + std::to_string(raw.ptr) + ":" + std::to_string(raw.adj);
  return "M" + std::to_string(raw.adj) + ":"
         + encode_code_address(reinterpret_cast<const void*>(raw.ptr));
}

/// Reverses encode_member.
template <class Pmf>
Pmf decode_member(const std::string& target) {
  struct {
    uintptr_t ptr;
    ptrdiff_t adj;
  } raw;
  auto colon = target.find(':');
  if (target.size() < 2 || colon == std::string::npos)
    throw error("malformed member function reference '" + target + "'");
  try {
    if (target[0] == 'V') {
      raw.ptr = std::stoull(target.substr(1, colon - 1));
      raw.adj = std::stoll(target.substr(colon + 1));
    } else if (target[0] == 'M') {
      raw.adj = std::stoll(target.substr(1, colon - 1));
      raw.ptr = reinterpret_cast<uintptr_t>(decode_code_address(target.substr(colon + 1)));
    } else {
      throw error("malformed member function reference '" + target + "'");
    }
  } catch (const std::logic_error&) { // std::stoull / std::stoll
    throw error("malformed member function reference '" + target + "'");
  }
  Pmf pmf;
  std::memcpy(&pmf, &raw, sizeof(raw));
  return pmf;
}

/// The executable object of the worker as a T (its own type or a public
/// base class of it), or an error naming both types.
template <class T>
T& object_as(call_context& ctx) {
  auto& exe = ctx.executable;
  if (!exe.object)
    throw error("no executable object on this worker: call start<T>(...) before execute() "
                "(the function expects "
                + type_name<T>() + ")");
  if (exe.type == typeid(T).name())
    return *static_cast<T*>(exe.object.get());
  if (exe.throw_as_pointer) {
    try {
      exe.throw_as_pointer(exe.object.get());
    } catch (T* base) {
      return *base;
    } catch (...) {
    }
  }
  throw error("the worker's executable is " + demangle(exe.type.c_str())
              + " but the function expects " + type_name<T>());
}

template <class R, class F, class Tuple>
std::vector<char> apply_and_pack(F&& f, Tuple& args) {
  if constexpr (std::is_void_v<R>) {
    std::apply(std::forward<F>(f), args);
    return {};
  } else {
    auto result = std::apply(std::forward<F>(f), args);
    return pack(result);
  }
}

/// run(): a plain function or captureless lambda, R(Args...).
template <class Sig>
struct free_invoker;

template <class R, class... Args>
struct free_invoker<R(Args...)> {
  static void invoke(call_context& ctx) {
    auto fn = reinterpret_cast<R (*)(Args...)>(const_cast<void*>(decode_code_address(ctx.target)));
    auto args = unpack<std::decay_t<Args>...>(ctx.args);
    ctx.result = apply_and_pack<R>(fn, args);
  }
  static inline const std::string key
    = register_invoker(std::string{"free:"} + typeid(R(Args...)).name(), &invoke);
};

/// execute(): a function or lambda taking the executable first, R(T&, Args...).
template <class Sig>
struct object_invoker;

template <class R, class T, class... Args>
struct object_invoker<R(T&, Args...)> {
  static void invoke(call_context& ctx) {
    auto fn
      = reinterpret_cast<R (*)(T&, Args...)>(const_cast<void*>(decode_code_address(ctx.target)));
    auto& obj = object_as<std::remove_const_t<T>>(ctx);
    auto args = unpack<std::decay_t<Args>...>(ctx.args);
    ctx.result = apply_and_pack<R>([&](auto&... xs) -> R { return fn(obj, xs...); }, args);
  }
  static inline const std::string key
    = register_invoker(std::string{"object:"} + typeid(R(T&, Args...)).name(), &invoke);
};

/// execute(): a member function of the executable.
template <class Pmf, class R, class T, class... Args>
struct member_invoker {
  static void invoke(call_context& ctx) {
    auto pmf = decode_member<Pmf>(ctx.target);
    auto& obj = object_as<T>(ctx);
    auto args = unpack<std::decay_t<Args>...>(ctx.args);
    ctx.result = apply_and_pack<R>([&](auto&... xs) -> R { return (obj.*pmf)(xs...); }, args);
  }
  static inline const std::string key
    = register_invoker(std::string{"member:"} + typeid(Pmf).name(), &invoke);
};

/// start<T>(args...): constructs the worker's executable object.
template <class T, class... Args>
struct ctor_invoker {
  static void invoke(call_context& ctx) {
    auto args = unpack<Args...>(ctx.args);
    auto& exe = ctx.executable;
    exe.object = std::apply([](auto&... xs) { return std::make_shared<T>(xs...); }, args);
    exe.type = typeid(T).name();
    exe.throw_as_pointer = [](void* p) { throw static_cast<T*>(p); };
  }
  static inline const std::string key
    = register_invoker(std::string{"ctor:"} + typeid(T(Args...)).name(), &invoke);
};

} // namespace hvactor::detail
