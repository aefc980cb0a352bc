// The driver of netfault_test (tests/integration/netfault_test.py): a static
// job on an emulated cluster (hvactor-netcluster) whose ranks allreduce in a
// loop while the test cuts, blocks or throttles links.
//
//   netfault_driver [--address A] HOSTS ITERS ELEMS SLEEP_MS DIR [K=V ...]
//       num_hosts=HOSTS x 1 worker; every rank runs ITERS allreduces (sum) of
//       ELEMS floats, SLEEP_MS apart, and checks every result exactly. K=V
//       pairs are added to every worker's environment; with
//       NETFAULT_DATA=ADDR:PORT among them, every rank first reads its
//       "batch" from that TCP server each iteration (until it closes), so
//       that a rank behind a slow link submits its allreduces late.
//       Each rank writes DIR/running-R ("<host> <pid>") after its first
//       allreduce, and at its end DIR/rank-R, one line:
//         ok -1 <monotonic ns> <host> <iterations>
//         collective_error <peer> <monotonic ns> <host> <message>
//         other -1 <monotonic ns> <host> <message>
//
// Output (flushed at once):
//   STARTED <node per rank>           start() returned
//   EVENT rank=R <k=v ...>            every event a worker emits (stalls)
//   RESULT <report per rank, ' | '-joined>
//   ERROR <class>: <message>          run() or start() threw (one line)
//   DONE
// Exit code 0 after RESULT, 1 after ERROR, 2 on bad usage.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void write_whole(const std::string& path, const std::string& text) {
  std::ofstream{path + ".tmp"} << text << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

/// Reads everything a TCP server at "ADDR:PORT" sends (one batch).
void fetch_batch(const std::string& where) {
  auto colon = where.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(where.substr(colon + 1))));
  if (::inet_pton(AF_INET, where.substr(0, colon).c_str(), &sa.sin_addr) != 1)
    throw std::runtime_error("NETFAULT_DATA: bad address " + where);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (fd >= 0)
      ::close(fd);
    throw std::runtime_error("NETFAULT_DATA: cannot connect to " + where);
  }
  char buf[65536];
  while (::read(fd, buf, sizeof buf) > 0) {
  }
  ::close(fd);
}

std::string allreduce_loop(int32_t iters, int32_t elems, int32_t sleep_ms, std::string dir) {
  hvd::init();
  int me = hvd::rank();
  int n = hvd::size();
  const char* h = std::getenv("HOROVOD_HOSTNAME");
  std::string host = h ? h : "?";
  std::vector<float> x(static_cast<size_t>(elems));
  const char* data = std::getenv("NETFAULT_DATA");
  std::string report;
  int i = 0;
  try {
    for (; i < iters; ++i) {
      if (data != nullptr && *data != 0)
        fetch_batch(data);
      // rank r contributes (r + 1) * (i % 7 + 1): sums are exact in float
      float mine = static_cast<float>((me + 1) * (i % 7 + 1));
      std::fill(x.begin(), x.end(), mine);
      // named, as a training step's gradients are (the stall inspector
      // names the tensor and the ranks that have not submitted it)
      auto h = hvd::allreduce_async(std::span<float>(x), hvd::op::sum, "grad");
      hvd::synchronize(h);
      float want = static_cast<float>(n * (n + 1) / 2 * (i % 7 + 1));
      for (float v : x)
        if (v != want)
          throw std::runtime_error("iteration " + std::to_string(i) + ": got "
                                   + std::to_string(v) + ", expected " + std::to_string(want));
      if (i == 0)
        write_whole(dir + "/running-" + std::to_string(me),
                    host + " " + std::to_string(::getpid()));
      if (sleep_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    report = "ok -1 " + std::to_string(monotonic_ns()) + " " + host + " " + std::to_string(i);
  } catch (const hvactor::collective_error& e) {
    report = "collective_error " + std::to_string(e.peer()) + " "
             + std::to_string(monotonic_ns()) + " " + host + " " + e.what();
  } catch (const std::exception& e) {
    report = "other -1 " + std::to_string(monotonic_ns()) + " " + host + " " + e.what();
  }
  report = one_line(report);
  write_whole(dir + "/rank-" + std::to_string(me), report);
  hvd::shutdown();
  return report;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  auto args = rt.args();
  if (args.size() < 6) {
    say("usage: netfault_driver [--address A] HOSTS ITERS ELEMS SLEEP_MS DIR [K=V ...]");
    return 2;
  }
  int hosts = 0, iters = 0, elems = 0, sleep_ms = 0;
  std::map<std::string, std::string> env;
  try {
    hosts = std::stoi(args[1]);
    iters = std::stoi(args[2]);
    elems = std::stoi(args[3]);
    sleep_ms = std::stoi(args[4]);
    for (size_t i = 6; i < args.size(); ++i) {
      auto eq = args[i].find('=');
      if (eq == std::string::npos)
        throw std::invalid_argument("not K=V: " + args[i]);
      env[args[i].substr(0, eq)] = args[i].substr(eq + 1);
    }
  } catch (const std::exception& e) {
    say(std::string("usage: ") + e.what());
    return 2;
  }
  std::string dir = args[5];
  int code = 0;
  std::optional<hvactor::executor> job;
  try {
    job.emplace(rt, hvactor::executor::create_settings({.placement_timeout = 20s}),
                hvactor::executor_options{.num_hosts = hosts, .num_workers_per_host = 1,
                                          .extra_env_vars = env});
    auto& ex = *job;
    ex.on_event([](int rank, const std::map<std::string, std::string>& f) {
      std::string line = "EVENT rank=" + std::to_string(rank);
      for (auto& [k, v] : f)
        if (k != "message")
          line += " " + k + "=" + v;
      auto m = f.find("message");
      if (m != f.end())
        line += " message=" + one_line(m->second);
      say(line);
    });
    ex.start();
    std::string nodes;
    for (auto& node : ex.worker_nodes())
      nodes += " " + node;
    say("STARTED" + nodes);
    auto results = ex.run(&allreduce_loop, iters, elems, sleep_ms, dir);
    std::string line = "RESULT";
    for (size_t r = 0; r < results.size(); ++r)
      line += (r ? " | " : " ") + results[r];
    say(line);
    ex.shutdown();
  } catch (const std::exception& e) {
    say("ERROR " + std::string(typeid(e).name()) + ": " + one_line(e.what()));
    code = 1;
    // The surviving ranks write their own errors (DIR/rank-R) as they see
    // them: give them time before shutdown() stops them.
    std::this_thread::sleep_for(std::chrono::seconds(std::getenv("NETFAULT_GRACE_S") ? std::atoi(std::getenv("NETFAULT_GRACE_S")) : 3));
  }
  job.reset();
  say("DONE");
  return code;
}
