// The driver elastic_test runs against real hvactor-node processes: one
// elastic job per run, its hosts given by a discovery schedule (Horovod's
// test_ray_elastic_v2 schedules, replayed by a discovery function) or by the
// cluster's live nodes.
//
//   elastic_driver --address A [OPTIONS]
//
// OPTIONS:
//   --schedule S      phases "HOSTS@SIZE/COMMITS|HOSTS@t=MS|HOSTS":
//                     HOSTS is "node:slots,node:slots"; a phase ends once a
//                     world of SIZE workers committed COMMITS epochs (rank
//                     0's commits), or MS after it began. Without it: the
//                     cluster's live nodes.
//   --script PATH     a host discovery script instead
//   --min N --max M --epochs E --epoch-ms MS --period-ms P --reset-limit K
//   --cooldown LOWER UPPER --elastic-timeout S --timeout-ms T
//   --cpus-per-worker C
//   --commit-ms MS    every commit's save() logs "saving", then takes MS
//   --advance-on KIND the schedule counts rank 0's KIND events (default
//                     "commit"; "saving": a phase ends mid-commit)
//   --fail-all        every worker throws in its first epoch
//   --torch           train a LibTorch model with torch_state (built with
//                     LibTorch only)
//
// Output lines (flushed at once):
//   STARTED                       start() returned
//   EVENT rank=R kind=K pid=P worker=W size=S epoch=E   every event
//   RESULTS n v1 v2 ...           run()'s results in rank order
//   COUNTS results=R started=S finished=F
//   ERROR <class>: <message>
//   DONE
// Exit code 0 after RESULTS, 1 after ERROR, 2 on bad usage.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "elastic_training.hpp"

namespace {

using namespace std::chrono_literals;
namespace hvd = hvactor::hvd;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string one_line(std::string text) {
  for (auto& c : text)
    if (c == '\n')
      c = ' ';
  return text;
}

struct phase {
  std::vector<hvactor::host_slots> hosts;
  int size = 0;
  int commits = 0;
  /// "@t=MS": the phase ends MS after it began instead.
  int after_ms = -1;
};

std::vector<hvactor::host_slots> parse_hosts(const std::string& text) {
  std::vector<hvactor::host_slots> out;
  std::istringstream in{text};
  std::string item;
  while (std::getline(in, item, ',')) {
    auto colon = item.find(':');
    out.push_back({item.substr(0, colon), colon == std::string::npos
                                            ? 1
                                            : std::stoi(item.substr(colon + 1))});
  }
  return out;
}

std::vector<phase> parse_schedule(const std::string& text) {
  std::vector<phase> out;
  std::istringstream in{text};
  std::string item;
  while (std::getline(in, item, '|')) {
    phase p;
    auto at = item.find('@');
    p.hosts = parse_hosts(item.substr(0, at));
    if (at != std::string::npos && item.compare(at + 1, 2, "t=") == 0) {
      p.after_ms = std::stoi(item.substr(at + 3));
    } else if (at != std::string::npos) {
      auto slash = item.find('/', at);
      p.size = std::stoi(item.substr(at + 1, slash - at - 1));
      p.commits = std::stoi(item.substr(slash + 1));
    }
    out.push_back(p);
  }
  return out;
}

// The schedule's state: the discovery thread reads it, the event callback
// advances it.
struct schedule {
  std::mutex mu;
  std::vector<phase> phases;
  size_t current = 0;
  int commits = 0;

  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();

  std::vector<hvactor::host_slots> hosts() {
    std::lock_guard<std::mutex> lk{mu};
    auto& p = phases.at(current);
    if (p.after_ms >= 0 && current + 1 < phases.size()
        && std::chrono::steady_clock::now() - since >= std::chrono::milliseconds(p.after_ms)) {
      ++current;
      since = std::chrono::steady_clock::now();
    }
    return phases.at(current).hosts;
  }

  void committed(int size) {
    std::lock_guard<std::mutex> lk{mu};
    if (phases.empty())
      return;
    auto& p = phases.at(current);
    if (current + 1 >= phases.size() || size != p.size)
      return;
    if (++commits >= p.commits) {
      ++current;
      commits = 0;
      since = std::chrono::steady_clock::now();
    }
  }
};

} // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  auto args = rt.args();
  hvactor::executor_options opts{.min_workers = 1};
  auto s = hvactor::executor::create_settings({.timeout = 10s, .placement_timeout = 10s});
  training_options train;
  std::string advance_on = "commit";
  std::string schedule_text;
  std::string script;
  try {
    for (size_t i = 1; i < args.size(); ++i) {
      auto next = [&] {
        if (i + 1 >= args.size())
          throw std::invalid_argument(args[i] + " needs a value");
        return args[++i];
      };
      if (args[i] == "--schedule")
        schedule_text = next();
      else if (args[i] == "--script")
        script = next();
      else if (args[i] == "--min")
        opts.min_workers = std::stoi(next());
      else if (args[i] == "--max")
        opts.max_workers = std::stoi(next());
      else if (args[i] == "--epochs")
        train.epochs = std::stoi(next());
      else if (args[i] == "--epoch-ms")
        train.epoch_ms = std::stoi(next());
      else if (args[i] == "--commit-ms")
        train.commit_ms = std::stoi(next());
      else if (args[i] == "--advance-on")
        advance_on = next();
      else if (args[i] == "--period-ms")
        opts.discovery_period = std::chrono::milliseconds(std::stoi(next()));
      else if (args[i] == "--reset-limit")
        opts.reset_limit = std::stoi(next());
      else if (args[i] == "--cooldown") {
        int lower = std::stoi(next());
        opts.cooldown_range = std::pair{lower, std::stoi(next())};
      } else if (args[i] == "--elastic-timeout")
        opts.elastic_timeout = std::chrono::seconds(std::stoi(next()));
      else if (args[i] == "--timeout-ms")
        s.timeout = std::chrono::milliseconds(std::stoi(next()));
      else if (args[i] == "--cpus-per-worker")
        opts.cpus_per_worker = std::stoi(next());
      else if (args[i] == "--fail-all")
        train.fail = true;
      else if (args[i] == "--torch")
        train.torch = true;
      else
        throw std::invalid_argument("unknown option " + args[i]);
    }
  } catch (const std::exception& e) {
    say(std::string("usage: ") + e.what());
    return 2;
  }
  auto sched = std::make_shared<schedule>();
  if (!schedule_text.empty()) {
    sched->phases = parse_schedule(schedule_text);
    opts.discovery = hvactor::discovery::function([sched] { return sched->hosts(); });
  } else if (!script.empty()) {
    opts.discovery = hvactor::discovery::script(script);
  }
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  int code = 0;
  try {
    hvactor::executor ex{rt, s, opts};
    ex.on_event([&](int rank, const std::map<std::string, std::string>& f) {
      auto get = [&](const char* k) {
        auto i = f.find(k);
        return i == f.end() ? std::string{"-"} : i->second;
      };
      auto kind = get("kind");
      if (kind == "started")
        ++started;
      else if (kind == "finished")
        ++finished;
      else if (kind == advance_on && get("rank") == "0")
        sched->committed(std::stoi(get("size")));
      say("EVENT rank=" + std::to_string(rank) + " kind=" + kind + " pid=" + get("pid")
          + " worker=" + get("worker") + " size=" + get("size") + " epoch=" + get("epoch")
          + " host=" + get("host"));
    });
    ex.start();
    say("STARTED");
    auto results = ex.run(&elastic_train, train);
    // Events travel with the workers' stderr, results with their calls:
    // give the last events time to arrive.
    std::this_thread::sleep_for(500ms);
    std::string line = "RESULTS " + std::to_string(results.size());
    for (auto& r : results)
      line += " " + r;
    say(line);
    say("COUNTS results=" + std::to_string(results.size()) + " started="
        + std::to_string(started.load()) + " finished=" + std::to_string(finished.load()));
    ex.shutdown();
  } catch (const hvactor::elastic_timeout& e) {
    say("ERROR elastic_timeout: " + one_line(e.what()));
    code = 1;
  } catch (const hvactor::reset_limit_exceeded& e) {
    say("ERROR reset_limit_exceeded: " + one_line(e.what()));
    code = 1;
  } catch (const hvactor::worker_error& e) {
    say("ERROR worker_error: " + one_line(e.what()));
    code = 1;
  } catch (const std::invalid_argument& e) {
    say("ERROR invalid_argument: " + one_line(e.what()));
    code = 1;
  } catch (const std::exception& e) {
    say("ERROR error: " + one_line(e.what()));
    code = 1;
  }
  say("DONE");
  return code;
}
