// HVACTOR_GPU_OPERATIONS (Horovod's HOROVOD_GPU_OPERATIONS): read by the
// device half of hvd::init in every build.

#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "collectives/backends/device_setup.hpp"
#include "hvactor/errors.hpp"

namespace hvactor::collectives {

std::string gpu_operations() {
  const char* v = std::getenv(env::gpu_operations);
  std::string s = v && *v ? v : "auto";
  for (auto& c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (s != "AUTO" && s != "NCCL" && s != "GLOO" && s != "NONE")
    throw error(fmt::format("hvd::init: {}='{}' must be auto, NCCL, GLOO or NONE",
                            env::gpu_operations, v));
  return s;
}

} // namespace hvactor::collectives
