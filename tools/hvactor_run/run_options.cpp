#include "run_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <set>
#include <string_view>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "config_file.hpp"
#include "horovod_flags.hpp"
#include "options.hpp"
#include "tools/cluster/slurm_launch.hpp"
#include "base/internal/env_names.hpp"

namespace hvactor::run_tool {

namespace {

// The spellings of `parser`'s options that read the next word as their
// value ("-n", "--np"; not the flags, whose value is implicit).
std::set<std::string> value_options(const cxxopts::Options& parser) {
  std::set<std::string> out;
  for (const auto& group : parser.groups())
    for (const auto& o : parser.group_help(group).options) {
      if (o.has_implicit || o.is_boolean)
        continue;
      if (!o.s.empty())
        out.insert("-" + o.s);
      for (const auto& l : o.l)
        out.insert("--" + l);
    }
  return out;
}

} // namespace

std::pair<std::vector<std::string>, std::vector<std::string>>
split_at_program(int argc, char** argv, const cxxopts::Options& parser) {
  auto takes_value = value_options(parser);
  std::vector<std::string> ours, program;
  bool after = false;
  bool value_next = false; // the previous word was an option that reads one
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (!after && a == "--") {
      after = true;
      continue;
    }
    // The first word that is no option and no option's value starts the
    // program (horovodrun's "-np 4 python train.py").
    if (!after && i > 0 && !value_next && (a.empty() || a[0] != '-'))
      after = true;
    // mpirun's and horovodrun's single-dash spellings ("-np", "-cb",
    // "-hostfile"); cxxopts would read "-np" as "-n p".
    if (!after)
      a = long_spelling(a);
    value_next = !after && !value_next && takes_value.count(a) > 0;
    // horovodrun's "--blacklist-cooldown-range LOWER UPPER": one list for
    // cxxopts.
    if (!after && a == "--blacklist-cooldown-range" && i + 2 < argc
        && std::string{argv[i + 2]}.rfind("-", 0) != 0) {
      ours.push_back(a);
      ours.push_back(std::string{argv[i + 1]} + "," + argv[i + 2]);
      i += 2;
      value_next = false;
      continue;
    }
    (after ? program : ours).push_back(a);
  }
  return {ours, program};
}

namespace {

// The value of a numeric option, refused (exit 2) below `min`.
int int_option(const cxxopts::ParseResult& res, const std::string& name, int min) {
  int v = res[name].as<int>();
  if (v < min)
    throw std::invalid_argument(fmt::format("{}{} must be {} (got {})", name == "np" ? "-" : "--",
                                            name,
                                            min == 0 ? std::string{"0 or more"}
                                                     : "at least " + std::to_string(min),
                                            v));
  return v;
}

// horovodrun's stall-check flags, as the variables Horovod's stall
// inspector reads on every rank (after -x, so the flags win).
void stall_check_env(const cxxopts::ParseResult& res, std::map<std::string, std::string>& env) {
  const std::string warning = "stall-check-warning-time-seconds";
  const std::string shutdown = "stall-check-shutdown-time-seconds";
  if (res.count("no-stall-check")) {
    for (auto& name : {warning, shutdown})
      if (res.count(name))
        throw std::invalid_argument(fmt::format(
          "--no-stall-check turns the stall check off: drop --{} or --no-stall-check", name));
    env[env::stall_check_disable] = "1";
    return;
  }
  // The warning time the ranks will use: the flag, else -x's, else
  // Horovod's default.
  int warning_s = 60;
  std::string warning_from = "the default";
  if (res.count(warning)) {
    warning_s = int_option(res, warning, 1);
    env[env::stall_check_time_seconds] = std::to_string(warning_s);
    warning_from = "--" + warning;
  } else if (auto it = env.find(env::stall_check_time_seconds); it != env.end()) {
    // Not a whole number: left to the ranks, which name it at hvd::init.
    auto& v = it->second;
    int x = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc{} && end == v.data() + v.size()) {
      warning_s = x;
      warning_from = fmt::format("-x {}", env::stall_check_time_seconds);
    }
  }
  if (res.count(shutdown)) {
    int shutdown_s = int_option(res, shutdown, 0);
    // Horovod ignores a shutdown time below the warning time (it logs that
    // it will not shut down); refused here instead.
    if (shutdown_s > 0 && shutdown_s < warning_s)
      throw std::invalid_argument(fmt::format(
        "--{} must be 0 (never) or at least the warning time, {} s ({}); got {}", shutdown,
        warning_s, warning_from, shutdown_s));
    env[env::stall_shutdown_time_seconds] = std::to_string(shutdown_s);
  }
}

// The elastic job's options.
void read_elastic(const cxxopts::ParseResult& res, launch_options& o) {
  if (res.count("min-np"))
    o.min_np = int_option(res, "min-np", 1);
  if (res.count("max-np"))
    o.max_np = int_option(res, "max-np", 1);
  if (res.count("host-discovery-script"))
    o.discovery_script = res["host-discovery-script"].as<std::string>();
  if (res.count("slots-per-host")) {
    o.slots_per_host = int_option(res, "slots-per-host", 1);
    if (o.discovery_script.empty())
      throw std::invalid_argument("--slots-per-host needs --host-discovery-script (the slots of "
                                  "a discovered host whose line gives none)");
  }
  if (res.count("reset-limit"))
    o.reset_limit = int_option(res, "reset-limit", 0);
  if (res.count("blacklist-cooldown-range")) {
    auto range = res["blacklist-cooldown-range"].as<std::vector<int>>();
    if (range.size() != 2)
      throw std::invalid_argument("--blacklist-cooldown-range needs two numbers: LOWER UPPER");
    o.cooldown_range = std::pair{range[0], range[1]};
  }
  if (res.count("elastic-timeout"))
    o.elastic_timeout = int_option(res, "elastic-timeout", 1);
}

// Whether hvactor-run's variable `name` goes to every rank, as horovodrun
// exports its environment to remote ranks: not what the job sets for each
// rank itself (ranks, rendezvous, devices, the worker contract), not this
// process's cluster address and TLS files or secrets, not shell internals
// (Horovod's IGNORE_REGEXES: BASH_FUNC_*, OLDPWD, *CUDA_VISIBLE_DEVICES,
// its secret key).
bool forwarded(std::string_view name) {
  static const std::set<std::string_view> job_sets{
    env::rank, env::size, env::local_rank, env::local_size, env::cross_rank, env::cross_size,
    env::hostname, env::controller, env::cpu_operations, env::rendezvous_addr,
    env::rendezvous_port, env::gloo_iface, env::nccl_socket_ifname, env::gloo_timeout_seconds,
    env::elastic, env::rendezvous_scope, env::node_address, env::address, "HOROVOD_SECRET_KEY",
    "OLDPWD", "PWD", "SHLVL", "_"};
  auto starts = [&](std::string_view p) { return name.substr(0, p.size()) == p; };
  auto valid = !name.empty() && name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                       "abcdefghijklmnopqrstuvwxyz0123456789_")
                                  == std::string_view::npos;
  return valid && !job_sets.count(name) && !starts("BASH_FUNC_") && !starts("HVACTOR_TLS_")
         && !starts("HVACTOR_WORKER_") && !starts("HVACTOR_ELASTIC_") && !starts("HVACTOR_SHM_FD")
         && !name.ends_with("CUDA_VISIBLE_DEVICES");
}

// hvactor-run's environment, as every rank starts with it (-x and the
// flags set theirs over it).
void forward_environment(std::map<std::string, std::string>& env) {
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv{*e};
    auto eq = kv.find('=');
    if (eq != std::string_view::npos && forwarded(kv.substr(0, eq)))
      env.emplace(std::string{kv.substr(0, eq)}, std::string{kv.substr(eq + 1)});
  }
}

// Whether -H's `host` names this machine (horovodrun's local hosts).
bool is_this_machine(const std::string& host) {
  if (host == "localhost" || host == "127.0.0.1" || host == "::1")
    return true;
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && host == name;
}

// -x VAR=VALUE and -x VAR (the value hvactor-run has), as mpirun's -x and
// the one variable per -x that horovodrun hands it: a comma belongs to the
// value (NCCL_SOCKET_IFNAME=eth0,ib0), so every -x is read as it was
// written, in order, rather than as a list cxxopts splits at commas.
void read_env(const cxxopts::ParseResult& res, std::map<std::string, std::string>& env) {
  for (auto& kv : res.arguments()) {
    if (kv.key() != "env")
      continue;
    auto& word = kv.value();
    auto eq = word.find('=');
    if (eq == 0)
      throw std::invalid_argument("-x needs VAR=VALUE: '" + word + "' names no variable");
    if (eq != std::string::npos) {
      env[word.substr(0, eq)] = word.substr(eq + 1);
      continue;
    }
    const char* here = std::getenv(word.c_str());
    if (word.empty() || here == nullptr)
      throw std::invalid_argument("-x needs VAR=VALUE or the name of a variable set here: '"
                                  + word + "' is not set in hvactor-run's environment");
    env[word] = here;
  }
}

// What every rank gets: reservations, environment, output.
void read_ranks(const cxxopts::ParseResult& res, launch_options& o) {
  if (res.count("cpus-per-worker"))
    o.cpus_per_worker = int_option(res, "cpus-per-worker", 0);
  if (res.count("gpus-per-worker"))
    o.gpus_per_worker = int_option(res, "gpus-per-worker", 0);
  forward_environment(o.env);
  read_env(res, o.env);
  if (res.count("timeline"))
    o.env[env::timeline] = res["timeline"].as<std::string>();
  if (res.count("bind-to")) {
    auto bind = res["bind-to"].as<std::string>();
    if (bind != "core" && bind != "none")
      throw std::invalid_argument("--bind-to must be core or none (got '" + bind + "')");
    o.env[env::bind_to] = bind;
  }
  stall_check_env(res, o.env);
  if (res.count("output-dir"))
    o.output_dir = res["output-dir"].as<std::string>();
  o.timestamps = res.count("timestamps") > 0;
}

// The runtime's own options; in local mode (horovodrun -np N on one
// machine) N slots even when the machine has fewer cores.
std::vector<std::string> runtime_args(const cxxopts::ParseResult& res, const run_request& r,
                                      bool has_address) {
  std::vector<std::string> rt_args{"hvactor-run"};
  for (auto* name : {"address", "tls-cert", "tls-key", "tls-ca"})
    if (res.count(name))
      rt_args.insert(rt_args.end(), {std::string{"--"} + name, res[name].as<std::string>()});
  auto& o = r.launch;
  if (res.count("num-cpus")) {
    rt_args.insert(rt_args.end(), {"--num-cpus", std::to_string(int_option(res, "num-cpus", 1))});
  } else if (!has_address && !r.allocation) {
    // In 64 bits, capped: the launcher refuses what does not fit an int
    // with a message naming the options.
    int64_t slots = std::max({int64_t{o.np},
                              int64_t{o.num_hosts.value_or(1)} * o.per_host.value_or(1),
                              int64_t{o.min_np.value_or(0)}, int64_t{o.max_np.value_or(0)}});
    int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    int64_t cpus = std::min<int64_t>(std::max(slots * o.cpus_per_worker, cores),
                                     std::numeric_limits<int>::max());
    rt_args.insert(rt_args.end(), {"--num-cpus", std::to_string(cpus)});
  }
  if (res.count("insecure"))
    rt_args.push_back("--insecure");
  return rt_args;
}

} // namespace

void declare_run_options(cxxopts::Options& parser) {
  // clang-format off
  parser.add_options()
    ("n,np,num-proc", "number of slots (ranks)", cxxopts::value<int>())
    ("address", "HEAD:PORT of a cluster of hvactor-node processes (default: this machine, "
                "an embedded local cluster)", cxxopts::value<std::string>())
    ("num-hosts", "distinct nodes, one colocator each (with --per-host)", cxxopts::value<int>())
    ("per-host", "slots per node (with --num-hosts)", cxxopts::value<int>())
    ("cpus-per-worker", "CPUs reserved per slot (default 1)", cxxopts::value<int>())
    ("gpus-per-worker", "GPUs reserved per slot (default 0)", cxxopts::value<int>())
    ("min-np,min-num-proc", "elastic job: least number of processes; the job waits for this many slots "
               "and keeps going while at least this many survive", cxxopts::value<int>())
    ("max-np,max-num-proc", "elastic job: most processes (default: -np, else no limit)",
     cxxopts::value<int>())
    ("host-discovery-script", "elastic job: prints the usable hosts, one 'node-id:slots' or "
                              "'node-id' per line (default: the cluster's live nodes)",
     cxxopts::value<std::string>())
    ("slots-per-host", "elastic job: slots of a discovered host whose line gives none "
                       "(default 1)", cxxopts::value<int>())
    ("reset-limit", "elastic job: most resets (re-rendezvous) before the job fails",
     cxxopts::value<int>())
    ("blacklist-cooldown-range", "elastic job: 'LOWER UPPER' seconds a failed host stays out "
                                 "(default: for good)",
     cxxopts::value<std::vector<int>>())
    ("elastic-timeout", "elastic job: seconds to wait for --min-np slots (default 600)",
     cxxopts::value<int>())
    ("x,env", "VAR=VALUE set in every rank, or VAR: its value here (repeatable, one "
              "variable each; commas belong to the value)",
     cxxopts::value<std::string>())
    ("timeout", "seconds for placement and for every rank to start (default 30)",
     cxxopts::value<int>())
    ("output-dir", "also write DIR/rank.N/stdout and stderr (N zero-padded to the highest "
                   "rank's width)", cxxopts::value<std::string>())
    ("timestamps,prefix-output-with-timestamp", "prefix every forwarded line with its arrival "
                                                "time (also -prefix-timestamp)")
    ("timeline", "write a Chrome trace of every collective (sets HOROVOD_TIMELINE)",
     cxxopts::value<std::string>())
    ("bind-to", "core: every rank pinned to a core of its own by local rank, as mpirun "
                "--bind-to core (unbound when a node has more ranks than cores) | none (the "
                "default, as horovodrun); sets HVACTOR_BIND_TO",
     cxxopts::value<std::string>())
    ("stall-check-warning-time-seconds", "seconds a rank waits for the other ranks to submit "
                                         "an operation before it warns, naming them and the "
                                         "operation, again every such interval (whole seconds "
                                         ">= 1; default 60; sets "
                                         "HOROVOD_STALL_CHECK_TIME_SECONDS)",
     cxxopts::value<int>())
    ("stall-check-shutdown-time-seconds", "seconds until such a stall fails every rank: 0 "
                                          "(never, the default) or at least the warning time "
                                          "(sets HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)",
     cxxopts::value<int>())
    ("no-stall-check", "no stall warnings and no stall shutdown (sets "
                       "HOROVOD_STALL_CHECK_DISABLE=1)")
    ("num-cpus", "CPUs of the embedded local cluster (default: all)", cxxopts::value<int>())
    ("tls-cert", "this launcher's certificate (PEM), for a TLS cluster",
     cxxopts::value<std::string>())
    ("tls-key", "this launcher's private key (PEM)", cxxopts::value<std::string>())
    ("tls-ca", "the cluster CA (PEM)", cxxopts::value<std::string>())
    ("insecure", "join a non-loopback cluster without TLS")
    ("launcher", "auto | local | slurm: inside a Slurm allocation (SLURM_JOB_ID set, no "
                 "--address) hvactor-run starts the cluster on the allocated nodes itself",
     cxxopts::value<std::string>()->default_value("auto"))
    ("driver", "Slurm: bring the cluster up, then run the program once as an executor-API "
               "driver (HVACTOR_ADDRESS set) instead of -np copies of it")
    ("bind", "Slurm: the address the head listens on (default: the address of this host that "
             "reaches the nodes)", cxxopts::value<std::string>())
    ("h,help", "print this help");
  // clang-format on
  declare_horovod_options(parser);
}

cxxopts::ParseResult parse_run_options(cxxopts::Options& parser, std::vector<std::string> words) {
  auto res = tool::parse_options(parser, "hvactor-run", words);
  if (!res.count("config-file"))
    return res;
  auto more = config_file_words(res["config-file"].as<std::string>(),
                                [&](const std::string& flag) { return res.count(flag) > 0; });
  if (more.empty())
    return res;
  words.insert(words.end(), more.begin(), more.end());
  return tool::parse_options(parser, "hvactor-run", words);
}

run_request read_run_options(const cxxopts::ParseResult& res, std::vector<std::string> program) {
  if (!res.unmatched().empty())
    throw std::invalid_argument("unexpected argument '" + res.unmatched().front()
                                + "' (options go before the program)");
  if (program.empty())
    throw std::invalid_argument("no program: hvactor-run -np N PROGRAM [ARGS...]");
  run_request r;
  auto& o = r.launch;
  if (res.count("np"))
    o.np = int_option(res, "np", 1);
  if (res.count("num-hosts"))
    o.num_hosts = int_option(res, "num-hosts", 1);
  if (res.count("per-host"))
    o.per_host = int_option(res, "per-host", 1);
  read_elastic(res, o);
  read_hosts(res, r);
  if (!r.hosts.empty()) {
    int64_t slots = 0; // at most an int's worth (read_hosts)
    for (auto& h : r.hosts)
      slots += h.second;
    if (o.np <= 0)
      o.np = static_cast<int>(slots); // horovodrun: -np defaults to the hosts' slots
    else if (o.np > slots)
      throw std::invalid_argument(fmt::format(
        "-np {} needs {} slots but the hosts offer {}", o.np, o.np, slots));
    // horovodrun runs "-H localhost:4" on this machine, without ssh.
    if (r.hosts.size() == 1 && is_this_machine(r.hosts.front().first))
      r.hosts.clear();
  }
  // Inside a Slurm allocation without --address: hvactor-run starts the
  // cluster there, and the allocation gives the defaults (horovodrun's
  // LSF mode).
  bool has_address = res.count("address") || std::getenv(env::address) != nullptr
                     || !r.hosts.empty();
  r.driver = res.count("driver") > 0;
  r.allocation =
    cluster::allocation_to_launch(res["launcher"].as<std::string>(), has_address, r.driver);
  if (r.allocation && !r.driver)
    cluster::apply_allocation(*r.allocation, o, res.count("gpus-per-worker") > 0);
  if (o.np <= 0 && !o.num_hosts && !o.min_np && !r.driver)
    throw std::invalid_argument("-np N is required (or --num-hosts H --per-host K, or --min-np "
                                "N for an elastic job)");
  read_ranks(res, o);
  read_horovod_options(res, r);
  o.program = program.front();
  o.args.assign(program.begin() + 1, program.end());
  r.timeout = std::chrono::seconds(res.count("timeout") ? int_option(res, "timeout", 1) : 30);
  if (res.count("bind"))
    r.bind = res["bind"].as<std::string>();
  r.runtime_args = runtime_args(res, r, has_address);
  return r;
}

} // namespace hvactor::run_tool
