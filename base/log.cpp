#include "base/internal/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "base/internal/env_names.hpp"

namespace hvactor::log {

namespace {

std::mutex mtx;
std::string role = "driver";

level configured_level() {
  static const level lvl = [] {
    auto value = env::get(env::log_level).value_or("warn");
    if (value == "error")
      return level::error;
    if (value == "info")
      return level::info;
    if (value == "debug")
      return level::debug;
    return level::warn;
  }();
  return lvl;
}

} // namespace

bool enabled(level lvl) {
  return static_cast<int>(lvl) <= static_cast<int>(configured_level());
}

void set_role(std::string_view new_role) {
  std::lock_guard<std::mutex> guard{mtx};
  role = new_role;
}

void write(level lvl, std::string_view message) {
  static constexpr const char* names[] = {"error", "warn", "info", "debug"};
  std::lock_guard<std::mutex> guard{mtx};
  auto line = fmt::format("[hvactor {} pid={}] {}: {}\n", role, ::getpid(),
                          names[static_cast<int>(lvl)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

} // namespace hvactor::log
