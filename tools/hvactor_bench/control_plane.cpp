// hvactor-bench control-plane: how fast the cluster starts workers and
// answers calls, with raw CAF (a request/response to an echo actor in
// another process: the transport and actor kind hvactor's calls ride on) as
// the peer, interleaved in rounds (--peer caf).

#include "tools/hvactor_bench/control_plane.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "base/net/port_guard.hpp"
#include "actors/protocol/system_config.hpp"
#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/report.hpp"

namespace hvactor::bench_tool {

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

/// The call measured: one small argument there and back.
int32_t echo_call(int32_t x) {
  return x;
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

template <class F>
double calls_per_second(F call, double seconds) {
  size_t calls = 0;
  auto t0 = clock_type::now();
  while (ms_since(t0) < seconds * 1000) {
    call();
    ++calls;
  }
  return static_cast<double>(calls) / (ms_since(t0) / 1000);
}

using echo_actor = caf::typed_actor<caf::replies_to<int32_t>::with<int32_t>>;

echo_actor::behavior_type echo_impl(echo_actor::pointer) {
  return {[](int32_t x) { return x; }};
}

/// The peer: a child process (this program, __peer-caf) serving an echo
/// actor on 127.0.0.1, and a scoped_actor here calling it.
class raw_caf_peer {
public:
  explicit raw_caf_peer(caf::actor_system& sys) : self_{sys} {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0)
      throw std::runtime_error("--peer caf: cannot create pipes");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execl("/proc/self/exe", "hvactor-bench", "__peer-caf", nullptr);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    char buf[32] = {0};
    auto n = pid_ > 0 ? ::read(from_child[0], buf, sizeof(buf) - 1) : -1;
    ::close(from_child[0]);
    auto port = n > 0 ? static_cast<uint16_t>(std::atoi(buf)) : uint16_t{0};
    if (port == 0)
      throw std::runtime_error("--peer caf: the echo process did not start");
    auto echo = sys.middleman().remote_actor<echo_actor>("127.0.0.1", port);
    if (!echo)
      throw std::runtime_error("--peer caf: cannot reach the echo actor: " + sys.render(echo.error()));
    echo_ = *echo;
  }

  ~raw_caf_peer() {
    if (stdin_ >= 0)
      ::close(stdin_); // the child exits when its stdin closes
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  raw_caf_peer(const raw_caf_peer&) = delete;
  raw_caf_peer& operator=(const raw_caf_peer&) = delete;

  /// One round trip. No request timeout, a bounded receive: CAF 0.17
  /// leaves a request's timeout message in a blocking actor's mailbox after
  /// the answer, and thousands of them slow every later receive (the way
  /// hvactor's own calls wait: ask() in base/internal/ask.hpp).
  void call() {
    caf::blocking_actor::accept_one_cond until_one;
    auto id = self_->request(echo_, caf::infinite, int32_t{1}).id();
    bool ok = false;
    self_->varargs_receive(until_one, id, [&](int32_t) { ok = true; }, [](caf::error&) {},
                           caf::after(5s) >> [] {});
    if (!ok)
      throw std::runtime_error("--peer caf: the echo actor did not answer within 5 s");
  }

private:
  caf::scoped_actor self_;
  echo_actor echo_;
  pid_t pid_ = -1;
  int stdin_ = -1;
};

struct count_result {
  int workers = 0;
  std::vector<double> starts_ms, calls_us;
  double rate = 0;
  /// Answers that were missing or not the value sent (--check).
  int64_t wrong = 0;
};

/// hvactor's sync run(noop) on one worker against raw CAF round trips, in
/// `rounds` interleaved rounds of `seconds / rounds` each.
struct peer_result {
  std::vector<double> ours, raw, ratios;
};

peer_result run_caf_peer(hvactor::runtime& rt, double seconds, int rounds, progress& line) {
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = 60s}), {.num_workers = 1}};
  ex.start();
  caf::actor_system_config cfg;
  hvactor::configure_system(cfg, 2);
  caf::actor_system sys{cfg};
  raw_caf_peer peer{sys};
  for (int i = 0; i < 500; ++i) { // warm both paths up
    ex.run(&echo_call, int32_t{i});
    peer.call();
  }
  peer_result out;
  for (int round = 0; round < rounds; ++round) {
    line.show(fmt::format("[control-plane] peer caf: round {}/{}", round + 1, rounds));
    out.ours.push_back(calls_per_second([&] { ex.run(&echo_call, int32_t{1}); }, seconds / rounds));
    out.raw.push_back(calls_per_second([&] { peer.call(); }, seconds / rounds));
    out.ratios.push_back(out.raw.back() > 0 ? out.ours.back() / out.raw.back() : 0);
  }
  line.clear();
  ex.shutdown();
  return out;
}

// start() `repeats` times with `w` workers, then synchronous calls for
// `seconds` on the last executor.
count_result measure_count(hvactor::runtime& rt, int w, int repeats, double seconds, bool check,
                           progress& line, std::vector<std::string>& nodes) {
  count_result r{w, {}, {}, 0, 0};
  for (int k = 0; k < repeats; ++k) {
    line.show(fmt::format("[control-plane] {} worker(s): start {}/{}", w, k + 1, repeats));
    hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = 60s}),
                         {.num_workers = w}};
    auto t0 = clock_type::now();
    ex.start();
    r.starts_ms.push_back(ms_since(t0));
    if (k + 1 == repeats) {
      line.show(fmt::format("[control-plane] {} worker(s): calls", w));
      auto end = clock_type::now() + std::chrono::duration<double>(seconds);
      for (int32_t i = 0; clock_type::now() < end; ++i) {
        auto c0 = clock_type::now();
        auto answers = ex.run(&echo_call, i);
        r.calls_us.push_back(ms_since(c0) * 1000.0);
        if (check)
          r.wrong += static_cast<int64_t>(w - std::count(answers.begin(), answers.end(), i));
      }
      nodes = ex.worker_nodes();
    }
    ex.shutdown();
  }
  line.clear();
  r.rate = static_cast<double>(r.calls_us.size()) / seconds;
  return r;
}

// --json: every sample and the machine's description.
void write_json(const std::string& file, const std::string& settings,
                const std::vector<count_result>& results, const std::vector<std::string>& nodes,
                const std::string& path, bool caf_peer, const peer_result& peer) {
  std::ofstream out{file};
  if (!out)
    throw std::runtime_error("cannot write " + file);
  out << json_head("control-plane", nodes, path, settings);
  for (size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    out << fmt::format("    {{\"workers\": {}, \"start_ms\": {}, \"calls_per_s\": {:.1f}, "
                       "\"call_us_p50\": {:.3f}, \"call_us_p99\": {:.3f}, \"wrong\": {}, "
                       "\"call_us\": {}}}{}\n",
                       r.workers, json_numbers(r.starts_ms), r.rate, quantile(r.calls_us, 0.5),
                       quantile(r.calls_us, 0.99), r.wrong, json_numbers(r.calls_us),
                       i + 1 < results.size() ? "," : "");
  }
  out << "  ]";
  if (caf_peer)
    out << fmt::format(",\n  \"peers\": {{\"caf\": {{\"hvactor_calls_per_s\": {}, "
                       "\"caf_calls_per_s\": {}, \"ratio\": {}}}}}",
                       json_numbers(peer.ours), json_numbers(peer.raw), json_numbers(peer.ratios));
  out << "\n}\n";
}

// --csv: one row per worker count.
void write_csv(const std::string& file, const std::vector<count_result>& results) {
  std::ofstream out{file};
  if (!out)
    throw std::runtime_error("cannot write " + file);
  out << "workers,start_ms_p50,start_ms_max,calls_per_s,call_us_p50,call_us_p99,wrong\n";
  for (auto& r : results)
    out << fmt::format("{},{:.3f},{:.3f},{:.1f},{:.3f},{:.3f},{}\n", r.workers,
                       quantile(r.starts_ms, 0.5), quantile(r.starts_ms, 1.0), r.rate,
                       quantile(r.calls_us, 0.5), quantile(r.calls_us, 0.99), r.wrong);
}

// Every option of hvactor-bench control-plane.
void declare_options(cxxopts::Options& p) {
  // clang-format off
  p.add_options()
    ("workers", "worker counts, comma-separated", cxxopts::value<std::string>()->default_value("1,4"))
    ("repeats", "start()s per worker count", cxxopts::value<int>()->default_value("3"))
    ("seconds", "seconds of calls per worker count (and of the peer comparison)",
     cxxopts::value<double>()->default_value("2"))
    ("peer", "caf: raw CAF request/response to an actor in another process, interleaved with "
             "run() on one worker", cxxopts::value<std::string>())
    ("rounds", "interleaved rounds of the peer comparison", cxxopts::value<int>()->default_value("10"))
    ("c,check", "check that every call's answer came from every worker with the value sent")
    ("json", "write every sample and the machine's description here", cxxopts::value<std::string>())
    ("csv", "write one row per worker count here", cxxopts::value<std::string>())
    ("h,help", "this text");
  // clang-format on
}

} // namespace

void serve_caf_echo() {
  caf::actor_system_config cfg;
  hvactor::configure_system(cfg, 2);
  caf::actor_system sys{cfg};
  auto echo = sys.spawn<caf::detached>(echo_impl); // as hvactor's worker actor
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1", true);
  // As hvactor's own ports: other users' connections and oversized frames
  // are refused below CAF.
  if (port)
    hvactor::port_guard::watch(*port);
  std::printf("%u\n", port ? *port : 0u);
  std::fflush(stdout);
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  std::_Exit(0);
}

int run_control_plane(hvactor::runtime& rt, const std::vector<std::string>& args) {
  cxxopts::Options p{"hvactor-bench control-plane",
                     "start() time, synchronous call rate and call latency of this cluster"};
  declare_options(p);
  auto o = parse_words(p, args, 2);
  if (o.count("help")) {
    std::cout << p.help() << "\n";
    return 0;
  }
  auto counts = parse_int_list(o["workers"].as<std::string>(), "--workers", 1, 4096);
  int repeats = o["repeats"].as<int>();
  double seconds = o["seconds"].as<double>();
  int rounds = o["rounds"].as<int>();
  if (repeats < 1 || repeats > 1000 || !(seconds > 0 && seconds <= 3600))
    throw std::invalid_argument("--repeats must be in 1..1000 and --seconds in (0, 3600]");
  if (rounds < 1 || rounds > 10000)
    throw std::invalid_argument(fmt::format("--rounds must be in 1..10000 (got {})", rounds));
  bool check = o.count("check") > 0;
  bool caf_peer = false;
  if (o.count("peer")) {
    if (o["peer"].as<std::string>() != "caf")
      throw std::invalid_argument("--peer " + o["peer"].as<std::string>()
                                  + ": control-plane's peer is caf (raw CAF request/response)");
    caf_peer = true;
  }
  fmt::print("# hvactor-bench control-plane: {} start()s per count, {:g} s of calls\n", repeats,
             seconds);
  fmt::print("# {:>7} {:>14} {:>14} {:>12} {:>12} {:>12} {:>7}\n", "workers", "start ms p50",
             "start ms max", "calls/s", "call us p50", "call us p99", "#wrong");
  progress line;
  std::vector<count_result> results;
  std::vector<std::string> nodes;
  std::string path;
  for (int w : counts) {
    auto r = measure_count(rt, w, repeats, seconds, check, line, nodes);
    fmt::print("  {:>7} {:>14.1f} {:>14.1f} {:>12.0f} {:>12.1f} {:>12.1f} {:>7}\n", w,
               quantile(r.starts_ms, 0.5), quantile(r.starts_ms, 1.0), r.rate,
               quantile(r.calls_us, 0.5), quantile(r.calls_us, 0.99),
               check ? std::to_string(r.wrong) : "N/A");
    std::fflush(stdout);
    results.push_back(std::move(r));
  }
  peer_result peer;
  if (caf_peer) {
    peer = run_caf_peer(rt, seconds, rounds, line);
    fmt::print("# peer caf (raw CAF request/response to an echo actor in another process), "
               "interleaved with run(noop) on 1 worker, {} rounds:\n", rounds);
    fmt::print("#   run(noop) {:.0f} calls/s, raw CAF {:.0f} calls/s (medians); run / raw CAF "
               "{:.2f} (min {:.2f}, max {:.2f})\n",
               quantile(peer.ours, 0.5), quantile(peer.raw, 0.5), quantile(peer.ratios, 0.5),
               quantile(peer.ratios, 0.0), quantile(peer.ratios, 1.0));
  }
  if (o.count("json"))
    write_json(o["json"].as<std::string>(),
               fmt::format("{{\"repeats\": {}, \"seconds\": {:g}, \"rounds\": {}, "
                           "\"check\": {}, \"peers\": [{}]}}",
                           repeats, seconds, rounds, check, caf_peer ? "\"caf\"" : ""),
               results, nodes, path, caf_peer, peer);
  if (o.count("csv"))
    write_csv(o["csv"].as<std::string>(), results);
  int64_t wrong = 0;
  for (auto& r : results)
    wrong += r.wrong;
  if (wrong > 0) {
    fmt::print(stderr, "hvactor-bench control-plane: {} wrong or missing answer(s)\n", wrong);
    return 1;
  }
  return 0;
}

} // namespace hvactor::bench_tool
