#include "horovod_flags.hpp"

#include <net/if.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "run_options.hpp"
#include "text_file.hpp"

namespace hvactor::run_tool {

namespace {

static_assert(limits::gloo_timeout_seconds == knobs::max_gloo_timeout_seconds);
constexpr int max_fusion_mb = limits::fusion_threshold_mb;
constexpr double max_cycle_ms = limits::cycle_time_ms;
constexpr int max_cache = limits::cache_capacity;

int int_flag(const cxxopts::ParseResult& res, const std::string& name, int min, int max) {
  int v = res[name].as<int>();
  if (v < min || v > max)
    throw std::invalid_argument(fmt::format("--{} must be from {} to {} (got {})", name, min, max, v));
  return v;
}

// --X and --no-X: the one given, as "1" / "0"; both is an error.
void toggle(const cxxopts::ParseResult& res, const std::string& name, const char* variable,
            std::map<std::string, std::string>& env) {
  bool on = res.count(name) > 0, off = res.count("no-" + name) > 0;
  if (on && off)
    throw std::invalid_argument(fmt::format("--{0} and --no-{0} contradict each other", name));
  if (on || off)
    env[variable] = on ? "1" : "0";
}

// Horovod's levels (any case) and hvactor's own for each.
std::pair<std::string, std::string> log_levels(std::string level) {
  std::transform(level.begin(), level.end(), level.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  static const std::map<std::string, std::string> ours = {
    {"TRACE", "debug"}, {"DEBUG", "debug"}, {"INFO", "info"},
    {"WARNING", "warn"}, {"ERROR", "error"}, {"FATAL", "error"}};
  auto it = ours.find(level);
  if (it == ours.end())
    throw std::invalid_argument(fmt::format(
      "--log-level must be one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL (got '{}')", level));
  return {level, it->second};
}

// The tunables and the timeline, as the variables hvd::init reads.
void tunables(const cxxopts::ParseResult& res, std::map<std::string, std::string>& env) {
  if (res.count("fusion-threshold-mb"))
    env[env::fusion_threshold] =
      std::to_string(int64_t{int_flag(res, "fusion-threshold-mb", 0, max_fusion_mb)} << 20);
  if (res.count("cycle-time-ms")) {
    // Parsed here: cxxopts reads "1ms" as 1.
    auto text = res["cycle-time-ms"].as<std::string>();
    char* end = nullptr;
    double ms = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0')
      throw std::invalid_argument(fmt::format("--cycle-time-ms {}: not a number", text));
    if (!std::isfinite(ms) || ms < 0 || ms > max_cycle_ms)
      throw std::invalid_argument(
        fmt::format("--cycle-time-ms must be from 0 to {} (got {})", max_cycle_ms, ms));
    env[env::cycle_time] = fmt::format("{}", ms);
  }
  if (res.count("cache-capacity"))
    env[env::cache_capacity] = std::to_string(int_flag(res, "cache-capacity", 0, max_cache));
  toggle(res, "hierarchical-allreduce", env::hierarchical_allreduce, env);
  toggle(res, "hierarchical-allgather", env::hierarchical_allgather, env);
  if (res.count("timeline-filename")) {
    auto path = res["timeline-filename"].as<std::string>();
    if (path.empty())
      throw std::invalid_argument("--timeline-filename must not be empty");
    if (res.count("timeline") && res["timeline"].as<std::string>() != path)
      throw std::invalid_argument("--timeline and --timeline-filename name different files");
    env[env::timeline] = path;
  }
  if (res.count("timeline-mark-cycles")) {
    if (!env.count(env::timeline))
      throw std::invalid_argument(
        "--timeline-mark-cycles marks cycles in the timeline: give --timeline-filename too");
    env[env::timeline_mark_cycles] = "1";
  }
}

// --thread-affinity N: core N for every rank's engine thread. Horovod's
// variable takes a core id per local rank (with fewer, hvd::init leaves
// the engine threads unpinned), so N is listed once for each rank a node
// of this job may hold: the job's largest size, at most 1024 (an elastic
// job without --max-np: 1024), which keeps the variable a few KiB.
void thread_affinity(const cxxopts::ParseResult& res, const launch_options& o,
                     std::map<std::string, std::string>& env) {
  if (!res.count("thread-affinity"))
    return;
  auto core = std::to_string(int_flag(res, "thread-affinity", 0, 1 << 20));
  constexpr int most_listed = 1024;
  int ranks = std::max({o.np, o.per_host.value_or(0), o.min_np.value_or(0),
                        o.max_np.value_or(o.min_np ? most_listed : 0), 1});
  std::string list = core;
  for (int i = 1; i < std::min(ranks, most_listed); ++i)
    list += "," + core;
  env[env::thread_affinity] = list;
}

// horovodrun's autotune flags, as the variables hvd::init reads (its
// bounds: counts from 0, the noise in [0, 1]); the knobs without
// --autotune are an error rather than silently unused.
void autotune(const cxxopts::ParseResult& res, std::map<std::string, std::string>& env) {
  bool on = res.count("autotune") > 0, off = res.count("no-autotune") > 0;
  if (on && off)
    throw std::invalid_argument("--autotune and --no-autotune contradict each other");
  if (off)
    env[env::autotune] = "0";
  struct count {
    const char* flag;
    const char* variable;
    int max;
  };
  static const count counts[] = {
    {"autotune-warmup-samples", env::autotune_warmup_samples, limits::autotune_warmup_samples},
    {"autotune-steps-per-sample", env::autotune_steps_per_sample,
     limits::autotune_steps_per_sample},
    {"autotune-bayes-opt-max-samples", env::autotune_bayes_opt_max_samples,
     limits::autotune_bayes_opt_max_samples}};
  std::vector<std::string> knobs;
  for (auto& c : counts)
    if (res.count(c.flag)) {
      env[c.variable] = std::to_string(int_flag(res, c.flag, 0, c.max));
      knobs.push_back(c.flag);
    }
  if (res.count("autotune-gaussian-process-noise")) {
    auto text = res["autotune-gaussian-process-noise"].as<std::string>();
    char* end = nullptr;
    double x = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(x >= 0 && x <= 1))
      throw std::invalid_argument(fmt::format(
        "--autotune-gaussian-process-noise must be a number in [0, 1] (got '{}')", text));
    env[env::autotune_gaussian_process_noise] = text;
    knobs.push_back("autotune-gaussian-process-noise");
  }
  if (res.count("autotune-log-file")) {
    auto path = res["autotune-log-file"].as<std::string>();
    if (path.empty())
      throw std::invalid_argument("--autotune-log-file must not be empty");
    env[env::autotune_log] = path;
    knobs.push_back("autotune-log-file");
  }
  if (!knobs.empty() && !on)
    throw std::invalid_argument(
      fmt::format("--{} shapes autotune: give --autotune too", knobs.front()));
  if (on)
    env[env::autotune] = "1";
}

// --network-interface(s): Gloo binds to the first, NCCL may use them all
// (Horovod's gloo_run sets the same two variables). On this machine's
// embedded cluster they must exist here.
void interfaces(const cxxopts::ParseResult& res, run_request& r) {
  std::vector<std::string> nics;
  for (auto* name : {"network-interfaces", "network-interface"})
    if (res.count(name))
      for (auto& n : res[name].as<std::vector<std::string>>())
        if (std::find(nics.begin(), nics.end(), n) == nics.end())
          nics.push_back(n);
  if (nics.empty())
    return;
  bool local = !res.count("address") && std::getenv(env::address) == nullptr && r.hosts.empty();
  for (auto& n : nics) {
    if (n.empty() || n.size() >= IF_NAMESIZE || n.find_first_of(" /,") != std::string::npos)
      throw std::invalid_argument(fmt::format("--network-interface '{}' is not an interface name", n));
    if (local && ::if_nametoindex(n.c_str()) == 0)
      throw std::invalid_argument(
        fmt::format("--network-interface '{}': no such network interface on this machine", n));
  }
  r.launch.env[env::gloo_iface] = nics.front();
  r.launch.env[env::nccl_socket_ifname] = fmt::format("{}", fmt::join(nics, ","));
}

// The hosts as -H or a host file lists them: each name once (a hash set:
// 200,000 lines read in linear time), 1 to 2^20 slots each, and slots in
// all that fit -np's int. `from` names the list in messages ("-H/--hosts",
// "--hostfile PATH").
class host_list {
 public:
  explicit host_list(std::string from) : from_(std::move(from)) {}

  /// `item` as written, for messages; `where`: ":LINE" in a host file.
  void add(std::string host, std::string_view slots, std::string_view item,
           const std::string& where, const char* form) {
    int n = 1;
    if (slots.data() != nullptr) {
      long v = 0;
      auto [end, ec] = std::from_chars(slots.data(), slots.data() + slots.size(), v);
      if (slots.empty() || ec != std::errc{} || end != slots.data() + slots.size() || v < 1)
        throw std::invalid_argument(fmt::format(
          "{}{}: '{}': slots must be a whole number from 1 ({})", from_, where, item, form));
      if (v > max_slots)
        throw std::invalid_argument(fmt::format("{}{}: '{}': slots must be at most {}", from_,
                                                where, item, max_slots));
      n = static_cast<int>(v);
    }
    if (host.empty() || host.front() == '-' ||
        host.find_first_of(" \t'\"`$;&|<>\\") != std::string::npos)
      throw std::invalid_argument(
        fmt::format("{}{}: '{}' is not a host name or address", from_, where, item));
    if (!seen_.insert(host).second)
      throw std::invalid_argument(
        fmt::format("{}{}: host '{}' is listed twice", from_, where, host));
    total_ += n;
    hosts_.emplace_back(std::move(host), n);
  }

  std::vector<std::pair<std::string, int>> take() {
    if (total_ > std::numeric_limits<int>::max())
      throw std::invalid_argument(fmt::format(
        "{}: the hosts offer {} slots in all, more than {} (the most -np can be)", from_, total_,
        std::numeric_limits<int>::max()));
    return std::move(hosts_);
  }

 private:
  static constexpr long max_slots = 1 << 20;
  std::string from_;
  std::vector<std::pair<std::string, int>> hosts_;
  std::unordered_set<std::string> seen_;
  int64_t total_ = 0;
};

// -H host[:slots],...  (slots default 1, as horovodrun).
std::vector<std::pair<std::string, int>> parse_hosts(std::string_view spec) {
  host_list hosts{"-H/--hosts"};
  for (size_t at = 0; at <= spec.size();) {
    auto comma = std::min(spec.find(',', at), spec.size());
    auto item = spec.substr(at, comma - at);
    at = comma + 1;
    auto colon = item.rfind(':');
    if (colon == std::string_view::npos)
      hosts.add(std::string{item}, {}, item, "", "host:slots");
    else
      hosts.add(std::string{item.substr(0, colon)}, item.substr(colon + 1), item, "",
                "host:slots");
  }
  return hosts.take();
}

// A host file is a list of machines, a line each; a bound on what one
// makes us read.
constexpr uintmax_t max_hostfile_bytes = uintmax_t{16} << 20;

// The words of `line` (blanks: space, tab, CR).
std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  for (size_t at = 0;;) {
    at = line.find_first_not_of(" \t\r", at);
    if (at == std::string_view::npos)
      return words;
    auto end = std::min(line.find_first_of(" \t\r", at), line.size());
    words.push_back(line.substr(at, end - at));
    at = end;
  }
}

// horovodrun's host file: "host slots=N" per line ("host" alone: 1 slot),
// '#' comments. Never opened when it is not a regular file (a FIFO would
// block for ever).
std::vector<std::pair<std::string, int>> read_hostfile(const std::string& path) {
  std::string text;
  try {
    text = tool::read_text_file(path, "it", max_hostfile_bytes);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("--hostfile {}", e.what()));
  }
  host_list hosts{"--hostfile " + path};
  std::string_view rest{text};
  for (int n = 1; !rest.empty(); ++n) {
    auto eol = std::min(rest.find('\n'), rest.size());
    auto line = rest.substr(0, eol);
    rest.remove_prefix(std::min(eol + 1, rest.size()));
    line = line.substr(0, line.find('#'));
    auto words = words_of(line);
    if (words.empty())
      continue;
    auto where = fmt::format(":{}", n);
    if (words.size() > 2)
      throw std::invalid_argument(
        fmt::format("--hostfile {}{}: unexpected '{}'", path, where, words[2]));
    if (words.size() == 2 && words[1].substr(0, 6) != "slots=")
      throw std::invalid_argument(
        fmt::format("--hostfile {}{}: '{}' is not slots=N", path, where, words[1]));
    auto slots = words.size() == 2 ? words[1].substr(6) : std::string_view{};
    hosts.add(std::string{words[0]}, slots, line.substr(0, line.find_last_not_of(" \t\r") + 1),
              where, "host slots=N");
  }
  auto list = hosts.take();
  if (list.empty())
    throw std::invalid_argument(fmt::format("--hostfile {}: no hosts in it", path));
  return list;
}

} // namespace

void read_hosts(const cxxopts::ParseResult& res, run_request& r) {
  if (res.count("hosts") && res.count("hostfile"))
    throw std::invalid_argument("-H/--hosts and --hostfile both list the hosts: give one");
  if (res.count("hosts"))
    r.hosts = parse_hosts(res["hosts"].as<std::string>());
  else if (res.count("hostfile"))
    r.hosts = read_hostfile(res["hostfile"].as<std::string>());
  if (r.hosts.empty())
    return;
  if (res.count("address") || std::getenv(env::address) != nullptr)
    throw std::invalid_argument("-H/--hostfile bring up a cluster of their own: drop --address "
                                "(or HVACTOR_ADDRESS), or drop the hosts");
  if (res.count("ssh-port"))
    r.ssh_port = int_flag(res, "ssh-port", 1, 65535);
  if (res.count("ssh-identity-file"))
    r.ssh_identity = res["ssh-identity-file"].as<std::string>();
}

std::string long_spelling(const std::string& word) {
  if (word == "-np" || word.rfind("-np=", 0) == 0)
    return "-" + word;
  if (word == "-cb")
    return "--check-build";
  if (word == "-prefix-timestamp")
    return "--prefix-output-with-timestamp";
  if (word == "-hostfile" || word.rfind("-hostfile=", 0) == 0)
    return "-" + word;
  return word;
}

void declare_horovod_options(cxxopts::Options& parser) {
  // clang-format off
  parser.add_options("horovodrun")
    ("v,version", "print hvactor-run's version")
    ("gloo", "accepted: hvactor's ranks always run Gloo's controller for CPU collectives")
    ("mpi", "accepted with a warning: hvactor has no MPI controller (its ranks run Gloo and "
            "NCCL); the job runs as with --gloo")
    ("log-without-timestamp", "accepted: hvactor's log lines carry no timestamp (sets "
                              "HOROVOD_LOG_HIDE_TIME=1 in the ranks)")
    ("check-build", "(also -cb) print what this build has: frameworks, controllers, tensor "
                    "operations")
    ("start-timeout", "seconds for placement and for every rank to start (default: "
                      "HOROVOD_START_TIMEOUT, else --timeout, else 30)", cxxopts::value<int>())
    ("gloo-timeout-seconds", "seconds a rank's rendezvous and each collective step may take "
                             "(HOROVOD_GLOO_TIMEOUT_SECONDS; default: --timeout, else 30)",
     cxxopts::value<int>())
    ("network-interfaces", "comma-separated interfaces for Gloo (the first: "
                           "HOROVOD_GLOO_IFACE) and NCCL (all: NCCL_SOCKET_IFNAME)",
     cxxopts::value<std::vector<std::string>>())
    ("network-interface", "one interface, repeatable (as --network-interfaces)",
     cxxopts::value<std::vector<std::string>>())
    ("verbose", "say what hvactor-run does (its log at info level)")
    ("log-level", "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL: the ranks' and hvactor-run's "
                  "log level (HOROVOD_LOG_LEVEL, HVACTOR_LOG_LEVEL)", cxxopts::value<std::string>())
    ("config-file", "horovodrun's YAML of flags (params, timeline, stall_check, "
                    "library_options, logging); flags on the command line win",
     cxxopts::value<std::string>())
    ("fusion-threshold-mb", "fusion buffer MiB (HOROVOD_FUSION_THRESHOLD; 0: no fusion; "
                            "default 128)", cxxopts::value<int>())
    ("cycle-time-ms", "ms a batch waits for more tensors (HOROVOD_CYCLE_TIME; default 1)",
     cxxopts::value<std::string>())
    ("cache-capacity", "negotiated names kept (HOROVOD_CACHE_CAPACITY; 0: off; default 1024)",
     cxxopts::value<int>())
    ("hierarchical-allreduce", "shared memory inside a node, Gloo across "
                               "(HOROVOD_HIERARCHICAL_ALLREDUCE=1; the default with several ranks "
                               "per node)")
    ("no-hierarchical-allreduce", "flat Gloo across every rank (HOROVOD_HIERARCHICAL_ALLREDUCE=0)")
    ("hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER=1")
    ("no-hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER=0")
    ("timeline-filename", "write a Chrome trace of every collective (HOROVOD_TIMELINE)",
     cxxopts::value<std::string>())
    ("timeline-mark-cycles", "mark every negotiation cycle in the timeline "
                             "(HOROVOD_TIMELINE_MARK_CYCLES=1)")
    ("thread-affinity", "the core of every rank's engine thread (HOROVOD_THREAD_AFFINITY, "
                        "the core once per local rank)",
     cxxopts::value<int>())
    ("autotune", "tune the fusion threshold, cycle time and hierarchical switches during the "
                 "first steps (HOROVOD_AUTOTUNE=1)")
    ("no-autotune", "HOROVOD_AUTOTUNE=0")
    ("autotune-log-file", "rank 0 writes every scored sample there, CSV "
                          "(HOROVOD_AUTOTUNE_LOG)", cxxopts::value<std::string>())
    ("autotune-warmup-samples", "scores thrown away first (default 3)", cxxopts::value<int>())
    ("autotune-steps-per-sample", "steps per sample (default 10)", cxxopts::value<int>())
    ("autotune-bayes-opt-max-samples", "points of the Bayesian optimisation (default 20)",
     cxxopts::value<int>())
    ("autotune-gaussian-process-noise", "the samples' noise, in [0, 1] (default 0.8)",
     cxxopts::value<std::string>())
    ("output-filename", "write DIR/rank.N/stdout and stderr (as --output-dir)",
     cxxopts::value<std::string>())
    ("H,hosts", "host:slots,... : bring hvactor-node up on these machines over ssh for this "
                "job (a CA of its own, torn down at exit)", cxxopts::value<std::string>())
    ("hostfile", "(also -hostfile) a file of 'host slots=N' lines, as -H",
     cxxopts::value<std::string>())
    ("p,ssh-port", "ssh port on every host (default 22)", cxxopts::value<int>())
    ("i,ssh-identity-file", "the private key ssh logs in with", cxxopts::value<std::string>());
  // clang-format on
}

void read_horovod_options(const cxxopts::ParseResult& res, run_request& r) {
  auto& env = r.launch.env;
  tunables(res, env);
  thread_affinity(res, r.launch, env);
  autotune(res, env);
  interfaces(res, r);
  if (res.count("start-timeout"))
    r.timeout = std::chrono::seconds(int_flag(res, "start-timeout", 1, 1 << 30));
  else if (auto* v = std::getenv("HOROVOD_START_TIMEOUT"); v && !res.count("timeout")) {
    char* end = nullptr;
    long s = std::strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || s < 1 || s > 1 << 30)
      throw std::invalid_argument(fmt::format(
        "HOROVOD_START_TIMEOUT='{}' must be a whole number of seconds from 1", v));
    r.timeout = std::chrono::seconds(s);
  }
  if (res.count("gloo-timeout-seconds"))
    r.gloo_timeout = std::chrono::seconds(int_flag(res, "gloo-timeout-seconds", 1,
                                                   limits::gloo_timeout_seconds));
  if (res.count("output-filename")) {
    auto dir = res["output-filename"].as<std::string>();
    if (!r.launch.output_dir.empty() && r.launch.output_dir != dir)
      throw std::invalid_argument("--output-dir and --output-filename name different directories");
    r.launch.output_dir = dir;
  }
  r.verbose = res.count("verbose") > 0;
  if (res.count("gloo") && res.count("mpi"))
    throw std::invalid_argument("--gloo and --mpi are mutually exclusive (as in horovodrun)");
  if (res.count("mpi"))
    fmt::print(stderr, "hvactor-run: --mpi: hvactor has no MPI controller; the ranks run Gloo "
                       "(CPU) and NCCL (GPU) collectives, as with --gloo\n");
  if (res.count("log-without-timestamp"))
    env["HOROVOD_LOG_HIDE_TIME"] = "1";
  if (res.count("log-level")) {
    auto [horovod, ours] = log_levels(res["log-level"].as<std::string>());
    env["HOROVOD_LOG_LEVEL"] = horovod;
    env[env::log_level] = ours;
    ::setenv(env::log_level, ours.c_str(), 1); // hvactor-run's own log
  } else if (r.verbose) {
    ::setenv(env::log_level, "info", 1);
  }
}

std::string version_text() {
  return fmt::format("hvactor-run {} (hvactor {}; horovodrun's flags, Horovod's API)",
                     HVACTOR_VERSION, HVACTOR_VERSION);
}

std::string check_build_text() {
  auto mark = [](bool on) { return on ? "X" : " "; };
  return fmt::format("hvactor v{}:\n\n"
                     "Available Frameworks:\n"
                     "    [X] C++ buffers (hvactor::hvd)\n"
                     "    [{}] LibTorch (hvactor::torch)\n\n"
                     "Available Controllers:\n"
                     "    [ ] MPI\n"
                     "    [X] Gloo\n\n"
                     "Available Tensor Operations:\n"
                     "    [{}] NCCL\n"
                     "    [ ] DDL\n"
                     "    [ ] CCL\n"
                     "    [ ] MPI\n"
                     "    [X] Gloo\n"
                     "    [X] Shared memory\n\n"
                     "Other:\n"
                     "    [{}] CUDA\n"
                     "    [X] Mutual TLS (OpenSSL)\n",
                     HVACTOR_VERSION, mark(HVACTOR_BUILT_TORCH), mark(HVACTOR_BUILT_CUDA),
                     mark(HVACTOR_BUILT_CUDA));
}

} // namespace hvactor::run_tool
