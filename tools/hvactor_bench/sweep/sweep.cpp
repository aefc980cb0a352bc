#include "tools/hvactor_bench/sweep/sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "tools/hvactor_bench/sweep/collective.hpp"
#include "base/internal/process.hpp"
#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/load.hpp"
#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/report.hpp"
#include "tools/hvactor_bench/sweep/sweep_rounds.hpp"
#include "tools/hvactor_bench/sweep/sweep_types.hpp"

#ifdef HVACTOR_BENCH_CUDA
#include "collectives/backends/devices.hpp"
#endif

namespace hvactor::bench_tool {

namespace {

/// "4", "64K", "1M", "2G" -> bytes.
size_t parse_size(const std::string& text, const char* option) {
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("{} {}: not a size (e.g. 4, 64K, 1M)", option, text));
  }
  std::string unit = text.substr(pos);
  size_t mult = unit.empty() ? 1
              : unit == "K"  ? size_t{1} << 10
              : unit == "M"  ? size_t{1} << 20
              : unit == "G"  ? size_t{1} << 30
                             : 0;
  if (mult == 0 || n > (size_t{1} << 40) / mult)
    throw std::invalid_argument(fmt::format("{} {}: not a size up to 1T (units K, M, G)", option, text));
  return static_cast<size_t>(n) * mult;
}

// Every option of a collective's sweep.
void declare_sweep_options(cxxopts::Options& p) {
  add_layout_options(p);
  // clang-format off
  p.add_options()
    ("b,minbytes", "smallest message (K, M, G)", cxxopts::value<std::string>()->default_value("4"))
    ("e,maxbytes", "largest message", cxxopts::value<std::string>()->default_value("64M"))
    ("f,stepfactor", "size multiplier between steps", cxxopts::value<int>()->default_value("4"))
    ("iters", "timed calls per size and round, or auto: 1000 where hvactor's 1000 take at "
              "most --seconds, else --seconds' worth (at least 5)",
     cxxopts::value<std::string>()->default_value("auto"))
    ("w,warmup", "untimed calls per size and round, or auto: a tenth of the timed calls, at "
                 "least 5", cxxopts::value<std::string>()->default_value("auto"))
    ("seconds", "what --iters auto aims at per size", cxxopts::value<double>()->default_value("0.5"))
    ("rounds", "rounds: in each, hvactor and then every peer (the order rotating) measure all "
               "sizes; the median round is reported with the rounds' range",
     cxxopts::value<int>()->default_value("4"))
    ("c,check", "check every result (the #wrong column)")
    ("load", "N load threads per usable core (default priority) compete for the CPUs with "
             "hvactor's ranks and every peer for the whole run (--load-kind)",
     cxxopts::value<int>()->default_value("0"))
    ("load-kind", "spin: the load threads compute and never sleep, as a training job's compute "
                  "threads during backward | fork: each starts /bin/true over and over, as shell "
                  "loops and data loaders do", cxxopts::value<std::string>()->default_value("spin"))
    ("bind-to", "core: every rank of hvactor and of the mpi peer pinned to a core of its own "
                "(mpirun's default for 2 ranks; none when there are more ranks than cores) | none "
                "| auto: core on one node, none across nodes (emulated nodes share the cores), with "
                "more ranks than cores and with --backend gloo",
     cxxopts::value<std::string>()->default_value("auto"))
    ("backend", "auto | shm | gloo | hierarchical", cxxopts::value<std::string>()->default_value("auto"))
    ("gloo-algorithm", "auto | ring | bcube | gather | doubling: the Gloo allreduce (HVACTOR_GLOO_ALLREDUCE) of "
                       "hvactor and of the gloo peer", cxxopts::value<std::string>()->default_value("auto"))
    ("device", "cpu | gpu: host or device buffers (gpu: CUDA builds, one GPU or more per node)",
     cxxopts::value<std::string>()->default_value("cpu"))
    ("path", "both: hvactor's executor workers (the time_us column) and the same calls in an "
             "SPMD program under hvactor-run, the path users run (the spmd columns) | executor: "
             "the workers only", cxxopts::value<std::string>()->default_value("both"))
    ("peer", "also measure each size through mpi, gloo and/or torch (host buffers) or nccl "
             "(--device gpu; comma-separated), "
             "interleaved, with their time and ratio columns", cxxopts::value<std::string>())
    ("json", "write every sample and the machine's description here", cxxopts::value<std::string>())
    ("csv", "write one row per size here", cxxopts::value<std::string>())
    ("plot", "draw busbw and time against size into FILE.svg or FILE.png (gnuplot)",
     cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
}

// -b, -e, -f, --iters, -w, --check, --load, --bind-to, --backend.
void read_method(const cxxopts::ParseResult& o, config& c) {
  c.min_bytes = std::max<size_t>(4, parse_size(o["minbytes"].as<std::string>(), "-b"));
  c.max_bytes = parse_size(o["maxbytes"].as<std::string>(), "-e");
  if (c.max_bytes < c.min_bytes)
    throw std::invalid_argument("-e must not be below -b");
  int f = o["stepfactor"].as<int>();
  if (f < 2 || f > 1024)
    throw std::invalid_argument(fmt::format("-f must be in 2..1024 (got {})", f));
  c.factor = static_cast<size_t>(f);
  auto count = [&](const char* name, const char* option, int lowest) {
    auto v = o[name].as<std::string>();
    if (v == "auto")
      return lowest - 1;
    size_t pos = 0;
    int n = -1;
    try {
      n = std::stoi(v, &pos);
    } catch (const std::exception&) {
    }
    if (pos != v.size() || n < lowest || n > 1000000)
      throw std::invalid_argument(fmt::format("{} {}: must be auto or in {}..1000000", option, v, lowest));
    return n;
  };
  c.iters = count("iters", "--iters", 1);
  c.warmup = count("warmup", "-w", 0);
  c.seconds = o["seconds"].as<double>();
  if (!(c.seconds >= 0.001 && c.seconds <= 600))
    throw std::invalid_argument(fmt::format("--seconds must be in 0.001..600 (got {})", c.seconds));
  c.rounds = o["rounds"].as<int>();
  if (c.rounds < 1 || c.rounds > 100)
    throw std::invalid_argument(fmt::format("--rounds must be in 1..100 (got {})", c.rounds));
  c.check = o.count("check") > 0;
  c.load = o["load"].as<int>();
  c.load_kind = parse_load_kind(o["load-kind"].as<std::string>());
  if (c.load < 0 || c.load > 16)
    throw std::invalid_argument(fmt::format("--load must be in 0..16 busy threads per core (got {})",
                                            c.load));
  c.bind = o["bind-to"].as<std::string>();
  if (c.bind != "core" && c.bind != "none" && c.bind != "auto")
    throw std::invalid_argument("--bind-to must be auto, core or none (got '" + c.bind + "')");
  c.gloo_algorithm = o["gloo-algorithm"].as<std::string>();
  if (c.gloo_algorithm != "auto" && c.gloo_algorithm != "ring" && c.gloo_algorithm != "bcube"
      && c.gloo_algorithm != "gather" && c.gloo_algorithm != "doubling")
    throw std::invalid_argument("--gloo-algorithm must be auto, ring, bcube, gather or doubling (got '"
                                + c.gloo_algorithm + "')");
  c.backend = o["backend"].as<std::string>();
  if (c.backend != "auto" && c.backend != "shm" && c.backend != "gloo" && c.backend != "hierarchical")
    throw std::invalid_argument("--backend must be auto, shm, gloo or hierarchical (got '" + c.backend + "')");
  // Over Gloo a rank's receives complete on Gloo's device thread: pinned,
  // it shares the rank's one core with the caller (a 4 B allreduce of 2
  // ranks took 828 us bound, 178 us unbound; the gloo peer runs unbound).
  // More ranks than cores cannot have a core each (hvd::init would say so
  // in every rank): none, as mpirun.
  if (c.bind == "auto")
    c.bind = c.where.num_hosts > 1 || c.backend == "gloo"
                 || c.where.np > busy_load::usable_cores()
               ? "none"
               : "core";
}

// --peer with --num-hosts > 1: the peers' ranks go on the nodes of the
// emulated cluster this runs in (hvactor-netcluster), as hvactor's do.
void read_peer_hosts(config& c) {
  c.peer_hosts = netcluster_hosts();
  if (c.peer_hosts.empty())
    throw std::invalid_argument("--peer runs its ranks on this machine: use -np N (one node), "
                                "not --num-hosts > 1, or run inside an emulated cluster "
                                "(hvactor-netcluster up --nodes N -- hvactor-bench ...)");
  for (auto& name : c.peers)
    if (name != "mpi" && name != "gloo" && name != "spmd")
      throw std::invalid_argument("--peer " + name + " runs on one node: across the nodes of an "
                                  "emulated cluster the peers are mpi and gloo");
  if (static_cast<int>(c.peer_hosts.size()) < c.where.num_hosts)
    throw std::invalid_argument(fmt::format("--num-hosts {}: the emulated cluster has {} node(s)",
                                            c.where.num_hosts, c.peer_hosts.size()));
  c.peer_hosts.resize(static_cast<size_t>(c.where.num_hosts));
}

// --device and --peer.
void read_device_and_peers(const cxxopts::ParseResult& o, config& c) {
  auto device = o["device"].as<std::string>();
  if (device != "cpu" && device != "gpu")
    throw std::invalid_argument("--device must be cpu or gpu (got '" + device + "')");
  c.gpu = device == "gpu";
  if (c.gpu) {
#ifdef HVACTOR_BENCH_CUDA
    auto probe = collectives::probe_devices();
    if (probe.count == 0)
      throw std::invalid_argument("--device gpu: no CUDA device on this machine (" + probe.reason
                                  + ")");
#else
    throw std::invalid_argument("--device gpu: this hvactor-bench was built without CUDA/NCCL");
#endif
  }
  auto path = o["path"].as<std::string>();
  if (path != "both" && path != "executor")
    throw std::invalid_argument("--path must be both or executor (got '" + path + "')");
  c.path = path;
  // The SPMD column first; device buffers are measured in the workers only.
  if (path == "both" && !c.gpu)
    c.peers.push_back("spmd");
  if (o.count("peer")) {
    auto list = o["peer"].as<std::string>();
    for (size_t pos = 0; pos <= list.size();) {
      auto comma = std::min(list.find(',', pos), list.size());
      auto name = list.substr(pos, comma - pos);
      if (std::find(peer_names().begin(), peer_names().end(), name) == peer_names().end())
        throw std::invalid_argument("--peer " + list + ": '" + name + "' is not a peer (spmd, mpi, gloo, torch, nccl)");
      if (std::find(c.peers.begin(), c.peers.end(), name) == c.peers.end())
        c.peers.push_back(name);
      pos = comma + 1;
    }
    for (auto& name : c.peers)
      if (name == "spmd" && c.gpu)
        throw std::invalid_argument("--peer spmd measures host buffers: with --device gpu the "
                                    "SPMD path is not measured");
      else if ((name == "nccl") != c.gpu && name != "spmd")
        throw std::invalid_argument(c.gpu ? "--device gpu measures device buffers: its peer is "
                                            "nccl (mpi, gloo and torch measure host buffers)"
                                          : "--peer nccl measures device buffers: add --device gpu");
    if (c.where.num_hosts > 1)
      read_peer_hosts(c);
#ifdef HVACTOR_BENCH_CUDA
    int gpus = collectives::probe_devices().count;
    if (std::find(c.peers.begin(), c.peers.end(), "nccl") != c.peers.end() && c.where.np > gpus)
      throw std::invalid_argument(fmt::format("--peer nccl needs a GPU per rank (NCCL refuses two "
                                              "ranks on one GPU): -np {} on {} GPU(s)",
                                              c.where.np, gpus));
#endif
  }
  for (auto& name : c.peers)
    if (auto why = peer_missing(name); !why.empty())
      throw std::invalid_argument(why);
}

// --json, --csv, --plot: checked writable before anything runs.
void read_outputs(const cxxopts::ParseResult& o, config& c) {
  if (o.count("json")) {
    c.json = o["json"].as<std::string>();
    check_writable(c.json, "--json");
  }
  if (o.count("csv")) {
    c.csv = o["csv"].as<std::string>();
    check_writable(c.csv, "--csv");
  }
  if (o.count("plot")) {
    c.plot = o["plot"].as<std::string>();
    auto ext = c.plot.size() > 4 ? c.plot.substr(c.plot.size() - 4) : "";
    if (ext != ".svg" && ext != ".png")
      throw std::invalid_argument("--plot " + c.plot + ": the file must end in .svg or .png");
    try {
      c.gnuplot = find_program("gnuplot");
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("--plot needs gnuplot, which is not installed (Debian: apt-get "
                                  "install gnuplot-nox; scripts/setup.sh installs it)");
    }
    check_writable(c.plot, "--plot");
  }
}

config parse(const std::vector<std::string>& args) {
  config c;
  c.kind = args.size() > 1 ? args[1] : "";
  cxxopts::Options p{"hvactor-bench " + c.kind,
                     "nccl-tests' sweep of one collective through hvd:: (float32, sum), in "
                     "worker processes of this cluster, with peers in the same run"};
  declare_sweep_options(p);
  auto o = parse_words(p, args, 2);
  if (o.count("help") || c.kind.empty() || c.kind == "--help" || c.kind == "-h") {
    std::cout << p.help()
              << "\nsubcommands: allreduce, allgather, broadcast, train, control-plane "
                 "(hvactor-bench SUBCOMMAND --help)\n";
    std::exit(c.kind.empty() ? 2 : 0);
  }
  if (c.kind != "allreduce" && c.kind != "allgather" && c.kind != "broadcast")
    throw std::invalid_argument("unknown subcommand '" + c.kind
                                + "' (allreduce, allgather, broadcast, train, control-plane)");
  c.where = parse_layout(o);
  read_method(o, c);
  read_device_and_peers(o, c);
  read_outputs(o, c);
  return c;
}

std::map<std::string, std::string> backend_env(const std::string& backend) {
  if (backend == "gloo")
    return {{"HVACTOR_SHM", "0"}};
  if (backend == "hierarchical")
    return {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"}, {"HOROVOD_HIERARCHICAL_ALLGATHER", "1"}};
  return {};
}

// hvactor-run's options for the spmd peer: the cluster this run measures
// (joined with the same identity, or an embedded one with a slot per
// rank), the same layout, binding and environment as the workers'.
std::vector<std::string> spmd_args(const hvactor::runtime& rt, const config& c,
                                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> a;
  auto& ro = rt.options();
  const char* env_address = std::getenv("HVACTOR_ADDRESS");
  auto address = !ro.address.empty() ? ro.address : env_address ? env_address : "";
  if (!address.empty()) {
    a = {"--address", address};
    if (ro.tls.enabled())
      a.insert(a.end(), {"--tls-cert", ro.tls.certificate, "--tls-key", ro.tls.key, "--tls-ca",
                         ro.tls.cafile});
    if (ro.insecure)
      a.push_back("--insecure");
  } else {
    a = {"--num-cpus", std::to_string(std::max(c.where.np, busy_load::usable_cores()))};
  }
  if (c.where.num_hosts > 0)
    a.insert(a.end(), {"--num-hosts", std::to_string(c.where.num_hosts), "--per-host",
                       std::to_string(c.where.per_host)});
  else
    a.insert(a.end(), {"-np", std::to_string(c.where.np)});
  a.insert(a.end(), {"--bind-to", c.bind, "--timeout", "60"});
  for (auto& [k, v] : env)
    if (k != "HVACTOR_BIND_TO") // --bind-to sets it
      a.insert(a.end(), {"-x", k + "=" + v});
  return a;
}

/// The sizes of the sweep; allgather's are whole multiples of ranks x 4 B
/// (every rank contributes the same count), as nccl-tests rounds them.
std::vector<size_t> sizes_of(const config& c) {
  std::vector<size_t> out;
  size_t unit = c.kind == "allgather" ? sizeof(float) * static_cast<size_t>(c.where.np) : sizeof(float);
  for (size_t b = c.min_bytes;; b *= c.factor) {
    size_t s = std::max(unit, b / unit * unit);
    if (out.empty() || out.back() != s)
      out.push_back(s);
    if (b > c.max_bytes / c.factor)
      break;
  }
  return out;
}

std::string peer_title(const std::string& name) {
  return name == "spmd" ? "hvactor, the same calls in an SPMD program under hvactor-run (the "
                          "path users run)"
       : name == "mpi" ? "Open MPI (hvactor-bench-mpi under mpirun)"
       : name == "gloo" ? "raw Gloo (its own context, full mesh over TCP)"
       : name == "nccl" ? "raw NCCL (one process over the ranks' GPUs, ncclCommInitAll; each call "
                          "synchronized)"
                        : "torch.distributed, gloo backend (python3-torch)";
}

// The table's header: what runs, the load, the peers, the columns.
void print_header(const config& c, const busy_load& load) {
  auto calls = c.iters > 0 ? fmt::format("{} timed + {} warm-up calls per size", c.iters,
                                         c.warmup >= 0 ? c.warmup : std::max(5, c.iters / 10))
                           : fmt::format("timed calls per size: 1000, or {} s' worth where 1000 "
                                         "take longer (calls column); warm-up: a tenth",
                                         c.seconds);
  fmt::print("# hvactor-bench {}: {} ranks, float32 sum, {} buffers, {}{}\n", c.kind, c.where.np,
             c.gpu ? "device" : "host", calls, c.check ? ", checked" : "");
  fmt::print("# {} round(s); in each, every implementation measures all sizes in one warm job, "
             "the order rotating; time_us: the median round, range: the rounds' (max - min) / "
             "median\n",
             c.rounds);
  if (c.load > 0)
    fmt::print("# load: {} {} thread(s) per core, {} in all on {} usable cores, for the whole "
               "run (hvactor and every peer)\n",
               c.load, to_string(c.load_kind), load.threads(), busy_load::usable_cores());
  for (auto& p : c.peers)
    fmt::print("# peer {}: {}, {} ranks {}, the same calls per size\n", p, peer_title(p),
               c.where.np,
               p == "spmd" && c.spmd_after
                 ? std::string{"on the same cluster, its rounds after the workers' (they hold "
                               "the slots)"}
               : p == "spmd" ? std::string{"on an embedded cluster of hvactor-run's own"}
               : c.peer_hosts.empty()
                 ? std::string{"on this machine"}
                 : fmt::format("on {} nodes of emulated cluster {} ({} each)", c.peer_hosts.size(),
                               std::getenv("HVACTOR_NETCLUSTER"), c.where.per_host));
  if (!c.peers.empty())
    fmt::print("# <peer>_us: the peer's time per call; x<peer>: its time / hvactor's (above 1: "
               "hvactor is faster)\n");
  std::string header =
    fmt::format("# {:>12} {:>12} {:>6} {:>6} {:>8} {:>12} {:>6} {:>8} {:>8} {:>7}", "size", "count",
                "type", "redop", "calls", "time_us", "range", "algbw", "busbw", "#wrong");
  for (auto& p : c.peers)
    header += fmt::format(" {:>12} {:>6} {:>7}", p + "_us", "range", "x" + p);
  fmt::print("{}\n", header);
}

// One row of the table.
void print_row(const config& c, const row& r) {
  auto text = fmt::format("  {:>12} {:>12} {:>6} {:>6} {:>8} {:>12.2f} {:>5.0f}% {:>8.3f} {:>8.3f} {:>7}",
                          r.bytes, r.count, "float", "sum", r.iters, r.time_us, 100 * r.range,
                          r.algbw, r.busbw, c.check ? std::to_string(r.wrong) : "N/A");
  for (auto& p : r.peers)
    text += fmt::format(" {:>12.2f} {:>5.0f}% {:>7.2f}", p.time_us, 100 * p.range, ratio(r, p));
  fmt::print("{}\n", text);
  std::fflush(stdout);
}

} // namespace

int run_sweep(hvactor::runtime& rt, const std::vector<std::string>& args) {
  auto c = parse(args);
  hvactor::executor_options opts;
  c.where.apply(opts);
  opts.extra_env_vars = backend_env(c.backend);
  opts.extra_env_vars["HVACTOR_BIND_TO"] = c.bind;
  opts.extra_env_vars["HVACTOR_GLOO_ALLREDUCE"] = c.gloo_algorithm;
  c.spmd_args = spmd_args(rt, c, opts.extra_env_vars);
  c.spmd_after = c.spmd_args.front() == "--address";
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = std::chrono::seconds(60)}),
                       opts};
  ex.start();
  auto sizes = sizes_of(c);
  busy_load load{c.load, c.load_kind};
  print_header(c, load);
  progress line;
  std::vector<double> call_us;
  auto counts = call_counts(ex, c, sizes, line, call_us);
  std::string path_info;
  auto nodes = ex.worker_nodes();
  auto rows = measure_rounds(ex, c, counts, call_us, line, path_info, [&] { ex.shutdown(); });
  line.clear();
  int64_t wrong_total = 0;
  for (auto& r : rows) {
    wrong_total += r.wrong;
    for (auto& p : r.peers)
      wrong_total += p.wrong;
    print_row(c, r);
  }
  fmt::print("# path: {}\n", path_info);
  ex.shutdown();
  if (c.backend == "shm" && path_info.find(c.kind + ": shm") == std::string::npos)
    fmt::print(stderr, "hvactor-bench: --backend shm asked, but {} took another path ({})\n",
               c.kind, path_info);
  if (!c.json.empty())
    write_json(c, rows, nodes, path_info);
  if (!c.csv.empty())
    write_csv(c, rows);
  if (!c.plot.empty())
    plot(c, rows);
  if (wrong_total > 0) {
    fmt::print(stderr, "hvactor-bench: {} wrong element(s)\n", wrong_total);
    return 1;
  }
  return 0;
}

} // namespace hvactor::bench_tool
