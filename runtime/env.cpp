#include "internal/knobs.hpp"

#include <cstdlib>
#include <stdexcept>

namespace hvactor::env {

std::optional<std::string> get(const char* name) {
  if (const char* value = std::getenv(name))
    return std::string{value};
  return std::nullopt;
}

int get_int(const char* name, int fallback) {
  auto value = get(name);
  if (!value)
    return fallback;
  try {
    size_t pos = 0;
    int result = std::stoi(*value, &pos);
    return pos == value->size() ? result : fallback;
  } catch (const std::exception&) {
    return fallback;
  }
}

} // namespace hvactor::env
