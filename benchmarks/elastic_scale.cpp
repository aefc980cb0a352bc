// elastic_scale: the driver of benchmarks/elastic_scale.py, an elastic job
// on an emulated cluster (hvactor-netcluster) whose world the script
// shrinks (a SIGKILLed worker, a node's link down) and grows (a host that
// discovery starts listing) while it trains.
//
//   elastic_scale [--address A] --script PATH --stop PATH [--min N] [--max M]
//                 [--step-ms 100] [--period-ms 1000] [--cooldown L U]
//                 [--timeout-ms 10000]
//
// Every worker trains steps of one 4 KiB allreduce and --step-ms of
// "compute", each followed by a commit, under hvd::elastic::run; the job
// ends once the file --stop exists (rank 0 looks, every rank learns it in
// the step's allreduce). Times are CLOCK_MONOTONIC nanoseconds, one clock
// for every network namespace of the machine.
//
// Output lines (flushed at once):
//   STARTED                                          start() returned
//   EVENT kind=started pid=P host=H t=T              a worker process began
//   EVENT kind=joined gen=G size=S host=H assigned=T connected=T synced=T t=T
//                                                    rank 0's first commit of a generation
//   EVENT kind=commit gen=G size=S step=K t=T        rank 0's commits
//   RESULTS n                                        run() returned n results
//   ERROR <message>
//   DONE
// Exit code 0 after RESULTS, 1 after ERROR, 2 on bad usage.

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace {

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

struct scale_options {
  int32_t step_ms = 100;
  std::string stop_file;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scale_options& x) {
  return f(caf::meta::type_name("scale_options"), x.step_ms, x.stop_file);
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// steady_clock is CLOCK_MONOTONIC in libstdc++.
std::string ns_of(std::chrono::steady_clock::time_point t) {
  return std::to_string(
    std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

std::string host() {
  const char* h = std::getenv("HOROVOD_HOSTNAME");
  return h ? h : "-";
}

// One step: an allreduce whose first element carries rank 0's stop flag.
bool step(const scale_options& o) {
  std::vector<float> grad(1024, 1.0f);
  grad[0] = hvd::rank() == 0 && std::filesystem::exists(o.stop_file) ? 1.0f : 0.0f;
  hvd::allreduce(std::span<float>(grad), hvd::op::sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
  return grad[0] > 0.5f;
}

bool scale_train(scale_options o) {
  hvactor::log::event({{"kind", "started"},
                       {"pid", std::to_string(::getpid())},
                       {"host", host()},
                       {"t", std::to_string(monotonic_ns())}});
  hvd::init();
  hvd::elastic::object_state<int64_t> st{0};
  int reported = -1;
  hvd::elastic::run(st, [&](auto& s) {
    for (;;) {
      bool stop = step(o);
      ++s.template value<0>();
      s.commit();
      auto now = std::to_string(monotonic_ns());
      if (hvd::rank() == 0 && hvd::elastic::generation() != reported) {
        reported = hvd::elastic::generation();
        auto r = hvd::elastic::last_reset();
        hvactor::log::event({{"kind", "joined"},
                             {"gen", std::to_string(reported)},
                             {"size", std::to_string(hvd::size())},
                             {"host", host()},
                             {"assigned", ns_of(r.assigned)},
                             {"connected", ns_of(r.connected)},
                             {"synced", ns_of(r.synced)},
                             {"t", now}});
      }
      if (hvd::rank() == 0)
        hvactor::log::event({{"kind", "commit"},
                             {"gen", std::to_string(hvd::elastic::generation())},
                             {"size", std::to_string(hvd::size())},
                             {"step", std::to_string(s.template value<0>())},
                             {"t", now}});
      if (stop)
        return;
    }
  });
  return true;
}

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  auto args = rt.args();
  hvactor::executor_options opts{.min_workers = 1};
  opts.cooldown_range = std::pair{1, 2};
  auto s = hvactor::executor::create_settings({.timeout = 10s, .placement_timeout = 60s});
  scale_options o;
  std::string script;
  try {
    for (size_t i = 1; i < args.size(); ++i) {
      auto next = [&] {
        if (i + 1 >= args.size())
          throw std::invalid_argument(args[i] + " needs a value");
        return args[++i];
      };
      if (args[i] == "--script")
        script = next();
      else if (args[i] == "--stop")
        o.stop_file = next();
      else if (args[i] == "--min")
        opts.min_workers = std::stoi(next());
      else if (args[i] == "--max")
        opts.max_workers = std::stoi(next());
      else if (args[i] == "--step-ms")
        o.step_ms = std::stoi(next());
      else if (args[i] == "--period-ms")
        opts.discovery_period = std::chrono::milliseconds(std::stoi(next()));
      else if (args[i] == "--cooldown") {
        int lower = std::stoi(next());
        opts.cooldown_range = std::pair{lower, std::stoi(next())};
      } else if (args[i] == "--timeout-ms")
        s.timeout = std::chrono::milliseconds(std::stoi(next()));
      else
        throw std::invalid_argument("unknown option " + args[i]);
    }
    if (script.empty() || o.stop_file.empty())
      throw std::invalid_argument("--script and --stop are required");
  } catch (const std::exception& e) {
    say(std::string("usage: ") + e.what());
    return 2;
  }
  opts.discovery = hvactor::discovery::script(script);
  int code = 0;
  try {
    hvactor::executor ex{rt, s, opts};
    ex.on_event([](int, const std::map<std::string, std::string>& f) {
      std::string line = "EVENT";
      if (auto k = f.find("kind"); k != f.end())
        line += " kind=" + k->second;
      for (auto& [k, v] : f)
        if (k != "kind" && k != "message")
          line += " " + k + "=" + v;
      say(line);
    });
    ex.start();
    say("STARTED");
    auto results = ex.run(&scale_train, o);
    say("RESULTS " + std::to_string(results.size()));
    ex.shutdown();
  } catch (const std::exception& e) {
    std::string text = e.what();
    for (auto& c : text)
      if (c == '\n')
        c = ' ';
    say("ERROR " + text);
    code = 1;
  }
  say("DONE");
  return code;
}
