#include "base/internal/env_names.hpp"

#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace hvactor::env {

std::optional<std::string> get(const char* name) {
  if (const char* value = std::getenv(name))
    return std::string{value};
  return std::nullopt;
}

int64_t get_int64(const char* name, int64_t fallback) {
  auto value = get(name);
  if (!value)
    return fallback;
  try {
    size_t pos = 0;
    int64_t result = std::stoll(*value, &pos);
    return pos == value->size() ? result : fallback;
  } catch (const std::exception&) {
    return fallback;
  }
}

int get_int(const char* name, int fallback) {
  auto value = get_int64(name, fallback);
  return value >= std::numeric_limits<int>::min() && value <= std::numeric_limits<int>::max()
           ? static_cast<int>(value)
           : fallback;
}

} // namespace hvactor::env
