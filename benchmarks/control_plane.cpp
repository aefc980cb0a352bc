// control_plane: how fast hvactor starts workers and makes calls on the
// embedded local cluster, with raw CAF (one request/response to an actor in
// another process, the transport hvactor's calls ride on) measured in the
// same run as the peer baseline.
//
//   control_plane [--repeats 5] [--seconds 2] [--rounds 10]
//
// The call-rate comparison interleaves hvactor and raw CAF in `rounds`
// rounds (seconds / rounds each) and reports the median of the per-round
// ratios: this machine's load swings between rounds.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>
#include "internal/system_config.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

void noop() {
}

struct model {
  int noop() {
    return 0;
  }
};

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

void row(const std::string& scenario, int workers, const std::string& metric,
         const std::string& value) {
  std::printf("| %-34s | %7d | %-22s | %-26s |\n", scenario.c_str(), workers, metric.c_str(),
              value.c_str());
  std::fflush(stdout);
}

// -- peer: raw CAF request/response to an actor in another process ---------

using echo_actor = caf::typed_actor<caf::replies_to<int32_t>::with<int32_t>>;

echo_actor::behavior_type echo_impl(echo_actor::pointer) {
  return {[](int32_t x) { return x; }};
}

// The child: publishes an echo actor, prints its port, lives until stdin
// closes (the parent exits or kills it).
[[noreturn]] void serve_echo() {
  caf::actor_system_config cfg;
  hvactor::configure_system(cfg, 2);
  caf::actor_system sys{cfg};
  auto echo = sys.spawn<caf::detached>(echo_impl); // as hvactor's worker actor
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1", true);
  std::printf("%u\n", port ? *port : 0u);
  std::fflush(stdout);
  char c;
  while (::read(STDIN_FILENO, &c, 1) > 0) {
  }
  std::_Exit(0);
}

// The peer: a child process serving an echo actor, and a scoped_actor of
// this process calling it, exactly the transport hvactor's calls ride on.
class raw_caf_peer {
public:
  raw_caf_peer(caf::actor_system& sys, const std::string& self_exe) : self_{sys} {
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0)
      return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      ::execl(self_exe.c_str(), self_exe.c_str(), "--serve-echo", nullptr);
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    char buf[32] = {0};
    auto n = ::read(from_child[0], buf, sizeof(buf) - 1);
    ::close(from_child[0]);
    uint16_t port = n > 0 ? static_cast<uint16_t>(std::atoi(buf)) : 0;
    if (auto echo = sys.middleman().remote_actor<echo_actor>("127.0.0.1", port))
      echo_ = *echo;
  }

  ~raw_caf_peer() {
    if (stdin_ >= 0)
      ::close(stdin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  /// Sequential request/response round trips per second over `seconds`.
  double calls_per_second(double seconds) {
    if (!echo_)
      return 0;
    size_t calls = 0;
    auto t0 = clock_type::now();
    while (ms_since(t0) < seconds * 1000) {
      // No request timeout, a bounded receive: CAF 0.17 leaves a request's
      // timeout message in a blocking actor's mailbox after the answer, and
      // thousands of them would slow every later receive (hvactor::ask).
      caf::blocking_actor::accept_one_cond until_one;
      auto id = self_->request(echo_, caf::infinite, int32_t{1}).id();
      self_->varargs_receive(until_one, id, [](int32_t) {}, [](caf::error&) {},
                             caf::after(5s) >> [] {});
      ++calls;
    }
    return static_cast<double>(calls) / (ms_since(t0) / 1000);
  }

private:
  caf::scoped_actor self_;
  echo_actor echo_;
  pid_t pid_ = -1;
  int stdin_ = -1;
};

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

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string{argv[1]} == "--serve-echo")
    serve_echo();
  hvactor::runtime rt{argc, argv, {.num_cpus = 8}};
  cxxopts::Options parser{"control_plane", "hvactor control-plane benchmark"};
  parser.add_options()("repeats", "start() repetitions per size",
                       cxxopts::value<int>()->default_value("5"))(
    "seconds", "duration of each call-rate measurement", cxxopts::value<double>()->default_value("2"))(
    "rounds", "interleaved hvactor / raw CAF rounds of the call rate",
    cxxopts::value<int>()->default_value("10"))("help", "this text");
  std::vector<char*> rest;
  for (auto& a : rt.args())
    rest.push_back(const_cast<char*>(a.c_str()));
  cxxopts::ParseResult opts;
  try {
    opts = parser.parse(static_cast<int>(rest.size()), rest.data());
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "control_plane: %s\n%s\n", e.what(), parser.help().c_str());
    return 2;
  }
  if (opts.count("help")) {
    std::printf("%s\n", parser.help().c_str());
    return 0;
  }
  int repeats = opts["repeats"].as<int>();
  double seconds = opts["seconds"].as<double>();
  int rounds = std::max(1, opts["rounds"].as<int>());
  auto settings = hvactor::executor::create_settings({});

  std::printf("hvactor control plane, embedded local cluster, %u cores\n\n",
              std::max(1u, std::thread::hardware_concurrency()));
  std::printf("| %-34s | %7s | %-22s | %-26s |\n", "scenario", "workers", "metric", "value");
  std::printf("|%s|%s|%s|%s|\n", std::string(36, '-').c_str(), std::string(9, '-').c_str(),
              std::string(24, '-').c_str(), std::string(28, '-').c_str());

  for (int workers : {1, 4, 8}) {
    std::vector<double> samples;
    for (int i = 0; i < repeats; ++i) {
      hvactor::executor ex{rt, settings, {.num_workers = workers}};
      auto t0 = clock_type::now();
      ex.start();
      samples.push_back(ms_since(t0));
      ex.shutdown();
    }
    row("start() until all workers ready", workers, "median ms (min, max)",
        fmt::format("{:.1f} ({:.1f}, {:.1f})", percentile(samples, 0.5),
                    *std::min_element(samples.begin(), samples.end()),
                    *std::max_element(samples.begin(), samples.end())));
  }

  {
    // hvactor's sync run(noop) on one worker against raw CAF round trips,
    // interleaved in rounds so that both see the same machine load.
    hvactor::executor ex{rt, settings, {.num_workers = 1}};
    ex.start();
    caf::actor_system_config cfg;
    hvactor::configure_system(cfg, 2);
    caf::actor_system sys{cfg};
    raw_caf_peer peer{sys, "/proc/self/exe"};
    for (int i = 0; i < 500; ++i)
      ex.run(&noop);
    peer.calls_per_second(0.2);
    std::vector<double> ours, raw, ratios;
    for (int round = 0; round < rounds; ++round) {
      ours.push_back(calls_per_second([&] { ex.run(&noop); }, seconds / rounds));
      raw.push_back(peer.calls_per_second(seconds / rounds));
      ratios.push_back(ours.back() / raw.back());
    }
    row("sync run(noop)", 1, "calls/s, median",
        fmt::format("{:.0f}", percentile(ours, 0.5)));
    row("peer: raw CAF request/response", 1, "calls/s, median",
        fmt::format("{:.0f}", percentile(raw, 0.5)));
    row("sync run(noop) / raw CAF", 1, "median (min, max) ratio",
        fmt::format("{:.2f} ({:.2f}, {:.2f})", percentile(ratios, 0.5),
                    *std::min_element(ratios.begin(), ratios.end()),
                    *std::max_element(ratios.begin(), ratios.end())));
    ex.shutdown();
  }

  {
    hvactor::executor ex{rt, settings, {.num_workers = 4}};
    ex.start();
    for (int i = 0; i < 500; ++i)
      ex.run(&noop);
    row("sync run(noop)", 4, "calls/s",
        fmt::format("{:.0f}", calls_per_second([&] { ex.run(&noop); }, seconds)));
    ex.shutdown();
  }

  for (int workers : {1, 4}) {
    hvactor::executor ex{rt, settings, {.num_workers = workers}};
    ex.start<model>();
    for (int i = 0; i < 500; ++i)
      ex.execute(&model::noop);
    std::vector<double> lat;
    auto t0 = clock_type::now();
    while (ms_since(t0) < seconds * 1000) {
      auto t1 = clock_type::now();
      ex.execute(&model::noop);
      lat.push_back(ms_since(t1) * 1000);
    }
    row("execute(&model::noop) latency", workers, "p50 / p99 us",
        fmt::format("{:.0f} / {:.0f}", percentile(lat, 0.5), percentile(lat, 0.99)));
    ex.shutdown();
  }

  std::printf("\nReference (not run here): Ray's 1:1 sync actor calls, about 2,000 calls/s "
              "(Ray docs).\n");
  return 0;
}
