#include "hvactor/code_registry.hpp"

#include <cxxabi.h>
#include <link.h>

#include <charconv>
#include <cstdlib>

#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace hvactor::detail {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mtx;
  return mtx;
}

std::unordered_map<std::string, invoker_fn>& registry() {
  static std::unordered_map<std::string, invoker_fn> map;
  return map;
}

struct module_view {
  std::string name;
  uintptr_t base = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> code; // executable ranges
};

std::string module_name(const char* path, bool first) {
  if (first || path == nullptr || *path == '\0')
    return "<main>";
  std::string p{path};
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::vector<module_view> loaded_modules() {
  std::vector<module_view> out;
  dl_iterate_phdr(
    [](dl_phdr_info* info, size_t, void* data) -> int {
      auto& mods = *static_cast<std::vector<module_view>*>(data);
      module_view mod;
      mod.name = module_name(info->dlpi_name, mods.empty());
      uintptr_t lowest = UINTPTR_MAX;
      for (int i = 0; i < info->dlpi_phnum; ++i) {
        const auto& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD)
          continue;
        lowest = std::min<uintptr_t>(lowest, ph.p_vaddr);
        if (ph.p_flags & PF_X)
          mod.code.emplace_back(info->dlpi_addr + ph.p_vaddr,
                                info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
      }
      mod.base = info->dlpi_addr + (lowest == UINTPTR_MAX ? 0 : lowest);
      mods.push_back(std::move(mod));
      return 0;
    },
    &out);
  return out;
}

std::string hex(uintptr_t x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(x));
  return buf;
}

} // namespace

std::string demangle(const char* mangled) {
  int status = 0;
  char* readable = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && readable ? readable : mangled;
  std::free(readable);
  return out;
}

uintptr_t parse_offset(const std::string& text, const std::string& target) {
  auto digits = text.rfind("0x", 0) == 0 ? text.substr(2) : text;
  uintptr_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
    throw error("malformed function reference '" + target + "': bad offset '" + text + "'");
  return value;
}

std::string register_invoker(std::string key, invoker_fn fn) {
  std::lock_guard<std::mutex> guard{registry_mutex()};
  registry().emplace(key, fn);
  return key;
}

invoker_fn find_invoker(const std::string& key) {
  std::lock_guard<std::mutex> guard{registry_mutex()};
  auto i = registry().find(key);
  return i == registry().end() ? nullptr : i->second;
}

std::string encode_code_address(const void* addr) {
  static std::mutex mtx;
  static std::unordered_map<const void*, std::string> cache;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto i = cache.find(addr); i != cache.end())
    return i->second;
  auto a = reinterpret_cast<uintptr_t>(addr);
  for (auto& mod : loaded_modules())
    for (auto& [lo, hi] : mod.code)
      if (a >= lo && a < hi)
        return cache[addr] = mod.name + "+" + hex(a - mod.base);
  throw error("address " + hex(a) + " is not code of any loaded module: only functions can run "
              "remotely");
}

const void* decode_code_address(const std::string& target) {
  static std::mutex mtx;
  static std::unordered_map<std::string, const void*> cache;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto i = cache.find(target); i != cache.end())
    return i->second;
  auto plus = target.rfind('+');
  if (plus == std::string::npos)
    throw error("malformed function reference '" + target + "'");
  auto name = target.substr(0, plus);
  uintptr_t offset = parse_offset(target.substr(plus + 1), target);
  for (auto& mod : loaded_modules()) {
    if (mod.name != name)
      continue;
    auto a = mod.base + offset;
    for (auto& [lo, hi] : mod.code)
      if (a >= lo && a < hi)
        return cache[target] = reinterpret_cast<const void*>(a);
    throw error("function reference '" + target + "' does not point at code in " + name
                + ": is the worker running the driver's binary?");
  }
  throw error("function reference '" + target + "': module " + name
              + " is not loaded in this worker");
}

} // namespace hvactor::detail
