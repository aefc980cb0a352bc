#include "collectives/backends/binding.hpp"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/internal/env_names.hpp"

namespace hvactor::collectives {

namespace {

// The cores this process could run on the first time it asked (before any
// binding of ours narrowed them).
const std::vector<int>& first_cores() {
  static const std::vector<int> cores = [] {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set))
          out.push_back(c);
    }
    return out;
  }();
  return cores;
}

// Every thread of this process now (the ones started later inherit the
// mask of the thread that starts them).
void pin_all_threads(const cpu_set_t& set) {
  ::sched_setaffinity(0, sizeof(set), &set);
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr)
    return;
  while (auto* e = ::readdir(dir)) {
    char* end = nullptr;
    long tid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0')
      ::sched_setaffinity(static_cast<pid_t>(tid), sizeof(set), &set);
  }
  ::closedir(dir);
}

// Whether the last call bound this process (a later "none" undoes only that).
bool bound_by_us = false;

void pin_to(const std::vector<int>& cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores)
    CPU_SET(c, &set);
  pin_all_threads(set);
}

// An earlier init of this process bound it: undo that.
void unbind() {
  if (bound_by_us)
    pin_to(first_cores());
  bound_by_us = false;
}

} // namespace

int first_core_count() {
  return static_cast<int>(first_cores().size());
}

std::string bind_from_env(int local_rank, int local_size) {
  const char* raw = std::getenv(env::bind_to);
  // Unset or empty: the default.
  std::string mode = raw && *raw ? raw : "none";
  if (mode != "none" && mode != "core")
    throw std::invalid_argument(fmt::format(
      "hvd::init: {}='{}' must be core (one core of its own per local rank, as mpirun "
      "--bind-to core) or none (the default)",
      env::bind_to, mode));
  const auto& cores = first_cores();
  if (mode == "none" || cores.empty()) {
    unbind();
    return "none";
  }
  if (local_size > static_cast<int>(cores.size())) {
    static std::once_flag said;
    auto why = fmt::format("{} local ranks on {} cores", local_size, cores.size());
    std::call_once(said, [&] {
      fmt::print(stderr, "hvd::init: {}=core: not bound ({}; a core each is not possible)\n",
                 env::bind_to, why);
    });
    unbind();
    return "none (" + why + ")";
  }
  int core = cores[static_cast<size_t>(std::max(local_rank, 0)) % cores.size()];
  pin_to({core});
  bound_by_us = true;
  return fmt::format("core {}", core);
}

thread_core_choice thread_core_from_env(int local_rank, int local_size) {
  const char* raw = std::getenv(env::thread_affinity);
  if (raw == nullptr || *raw == '\0')
    return {};
  std::string_view text{raw};
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format(
      "hvd::init: {}='{}' {}: it needs a core id per local rank, comma-separated (e.g. "
      "\"0,1\" for 2 local ranks); the engine thread of local rank i runs on the i-th",
      env::thread_affinity, text, why));
  };
  std::vector<int> ids;
  for (size_t from = 0; from <= text.size();) {
    size_t comma = std::min(text.find(',', from), text.size());
    auto item = text.substr(from, comma - from);
    while (!item.empty() && item.front() == ' ')
      item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ')
      item.remove_suffix(1);
    int id = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc{} || end != item.data() + item.size() || id < 0)
      throw bad(fmt::format("has '{}', not a core id", item));
    ids.push_back(id);
    from = comma + 1;
  }
  if (static_cast<int>(ids.size()) < local_size) {
    // Horovod's: said, and the engine threads stay where they are.
    auto why = fmt::format("{}='{}' names {} core{} for {} local ranks", env::thread_affinity,
                           text, ids.size(), ids.size() == 1 ? "" : "s", local_size);
    static std::once_flag said;
    std::call_once(said, [&] {
      fmt::print(stderr,
                 "hvd::init: {}: the engine thread stays unpinned (give a core id per local "
                 "rank, comma-separated, e.g. \"1,3\" for 2 local ranks)\n",
                 why);
    });
    return {std::nullopt, why};
  }
  // Every local rank's core, not only this one's: each rank then fails
  // alike instead of waiting for the one that did.
  const auto& allowed = first_cores();
  for (int k = 0; k < local_size && !allowed.empty(); ++k)
    if (std::find(allowed.begin(), allowed.end(), ids[static_cast<size_t>(k)]) == allowed.end())
      throw bad(fmt::format("gives local rank {} core {}, which this job's processes may not "
                            "run on (cores {})",
                            k, ids[static_cast<size_t>(k)], fmt::join(allowed, ",")));
  return {ids[static_cast<size_t>(std::max(local_rank, 0)) % ids.size()], {}};
}

bool pin_this_thread(int core) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (core < 0 || core >= CPU_SETSIZE)
    return false;
  CPU_SET(core, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

} // namespace hvactor::collectives
