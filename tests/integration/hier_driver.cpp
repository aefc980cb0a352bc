// The driver of hierarchical_test: jobs of num_hosts=H x num_workers_per_host=2
// on a real hvactor-node cluster.
//
//   hier_driver --address A compare H
//       the same collectives once with the automatic (hierarchical) path
//       and once with HOROVOD_HIERARCHICAL_ALLREDUCE=0 (flat Gloo):
//       INFO <rank> <hvd::backend_info()>      per rank and run
//       EXACT <0|1>    integer sums, min, max, allgather, broadcast identical
//       FPDIFF <max |hierarchical - flat|> over float averages
//       SAME <0|1>     every rank got the same bits on the hierarchical path
//   hier_driver --address A permute H SEEDS
//       permuted_collectives.hpp's workload (named async allreduces that
//       every rank submits in its own order) for seeds 0..SEEDS-1, with the
//       response cache on (its default) and off (HOROVOD_CACHE_CAPACITY=0):
//       PATH <on|off> <rank> <hvd::backend_info()>   per rank and setting
//       PERMUTED <on|off> <seed> <rank> <OK | what differs>
//       FAILED <on|off> <seed> <error>   a run that threw (the setting ends)
//   hier_driver --address A join H
//       join_workloads.hpp's hvd::join() workloads in one job, in turn:
//       PATH <rank> <hvd::backend_info()>
//       UNEVEN <rank> <result>     uneven_steps(10): rank r runs 10 + r
//                                  steps, then joins ("<2H-1>" when right)
//       JOIN_ALLREDUCE <first> <rank> <result>   first = 0 and 1
//       WHILE_JOINED <what> <joiner> <rank> <error>|<join()'s result>
//                                  allgather (joiner 0), broadcast from
//                                  the joiner (1), barrier (2)
//       FAILED <workload> <error>  a run that threw (the mode ends)
//   hier_driver --address A api H
//       api_workloads.hpp's checks (reducescatter, scale factors, async
//       and grouped collectives, objects, refusals) in one job:
//       API <rank> <OK | what was wrong>   and PATH <rank> <backend_info>
//   hier_driver --address A reducescatter H
//       reducescatter_workloads.hpp (issue 59) in one job:
//       PATH <rank> <hvd::backend_info()>
//       RS <rank> <OK | what was wrong>   even and uneven parts, sum, average
//       BYTES <rank> <reducescatter> <column> <allreduce>   bytes this rank
//                  wrote to sockets during a 16 MiB reducescatter, what its
//                  column sends to the other nodes, and during an allreduce
//   hier_driver --address A stall H DIR
//       stall_workloads.hpp's busy_peer (unnamed) with
//       HOROVOD_STALL_CHECK_TIME_SECONDS=1, _SHUTDOWN_TIME_SECONDS=3: rank
//       0 busy outside hvd calls, every other rank waiting in an allreduce:
//       STALL <rank> <ms>|<error>   (the busy rank: STALL 0 <error>)
//       EVENT <rank> <message>      every stall event
//   hier_driver --address A kill H VICTIM DIR
//       every rank allreduces 8 MiB in a loop; rank VICTIM SIGKILLs itself
//       300 ms in (writing DIR/killed); every other rank writes
//       DIR/rank-R: "<kind> <peer> <monotonic ns> <message>"
//   hier_driver --address A stop-kill H STOPPED VICTIM DIR
//       the same, rank STOPPED SIGSTOPping itself 300 ms in and VICTIM
//       SIGKILLing itself 300 ms later; every other rank reports
//   DONE at the end; exit code 0 unless something threw.

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "api_workloads.hpp"
#include "join_workloads.hpp"
#include "permuted_collectives.hpp"
#include "reducescatter_workloads.hpp"
#include "stall_workloads.hpp"
#include "victim_allreduce.hpp"

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}


/// Integer results (exact on every path) and float averages, as doubles:
/// sums/min/max of int64 over sizes that take several chunks, an allgather
/// of different sizes per rank, broadcasts from a rank on each node.
struct results {
  std::vector<double> exact;
  std::vector<double> floats;
  std::string info;
  template <class Inspector>
  friend auto inspect(Inspector& f, results& x) {
    return f(caf::meta::type_name("hier_results"), x.exact, x.floats, x.info);
  }
};

results collect() {
  hvd::init();
  int me = hvd::rank(), n = hvd::size();
  results out;
  out.info = std::to_string(me) + " " + hvd::backend_info();
  // 1300003 x 8 bytes (9.9 MiB: several of the shared-memory passes' slots
  // and Gloo's ring segments, none of them whole): its result comes back as
  // a digest (FNV-1a of the bytes, in two 32-bit halves) and a sample.
  for (size_t count : {size_t{1}, size_t{13}, size_t{5000}, size_t{300001}, size_t{1300003}})
    for (auto o : {hvd::op::sum, hvd::op::min, hvd::op::max}) {
      std::vector<int64_t> x(count);
      for (size_t i = 0; i < count; ++i)
        x[i] = static_cast<int64_t>((i * 2654435761ULL + static_cast<uint64_t>(me) * 40503) % 100003) - 50000;
      hvd::allreduce(std::span<int64_t>(x), o);
      if (count < 1000000) {
        out.exact.insert(out.exact.end(), x.begin(), x.end());
        continue;
      }
      uint64_t h = 1469598103934665603ULL;
      for (auto v : x)
        for (int b = 0; b < 8; ++b)
          h = (h ^ ((static_cast<uint64_t>(v) >> (8 * b)) & 0xff)) * 1099511628211ULL;
      out.exact.push_back(static_cast<double>(h >> 32));
      out.exact.push_back(static_cast<double>(h & 0xffffffffULL));
      for (size_t i = 0; i < count; i += 65537)
        out.exact.push_back(static_cast<double>(x[i]));
      out.exact.push_back(static_cast<double>(x.back()));
    }
  std::vector<int32_t> mine(static_cast<size_t>(me) * 30011 + 7);
  for (size_t i = 0; i < mine.size(); ++i)
    mine[i] = me * 1000 + static_cast<int32_t>(i % 1000);
  auto all = hvd::allgather(std::span<const int32_t>(mine));
  out.exact.insert(out.exact.end(), all.begin(), all.end());
  for (int root : {0, 1, n - 1}) {
    std::vector<int64_t> b(200003, me == root ? root + 5 : -1);
    hvd::broadcast(std::span<int64_t>(b), root);
    out.exact.insert(out.exact.end(), b.begin(), b.end());
  }
  hvd::barrier();
  std::vector<float> f(500009);
  uint64_t state = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(me + 1);
  for (auto& v : f) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
  }
  hvd::allreduce(std::span<float>(f), hvd::op::average);
  out.floats.assign(f.begin(), f.end());
  hvd::shutdown();
  return out;
}

/// One rank's run of a workload and the path its session took.
struct path_result {
  std::string info;
  std::string problems;
  template <class Inspector>
  friend auto inspect(Inspector& f, path_result& x) {
    return f(caf::meta::type_name("hier_path_result"), x.info, x.problems);
  }
};

path_result permuted_with_info(int seed) {
  hvactor::test::hvd_session s;
  path_result out;
  out.info = hvd::backend_info();
  out.problems = hvactor::test::permuted_ops(seed);
  return out;
}

path_result uneven_with_info(int base) {
  hvactor::test::hvd_session s;
  path_result out;
  out.info = hvd::backend_info();
  out.problems = hvactor::test::uneven_steps_ops(base);
  return out;
}

path_result api_with_info(int seed) {
  hvactor::test::hvd_session s;
  path_result out;
  out.info = hvd::backend_info();
  out.problems = hvactor::test::api::everything(static_cast<unsigned>(seed));
  return out;
}

/// `text` on one line (error messages may span several).
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

hvactor::executor_options hosts(int h, std::map<std::string, std::string> env = {}) {
  return {.num_hosts = h, .num_workers_per_host = 2, .extra_env_vars = std::move(env)};
}

hvactor::settings job_settings() {
  return hvactor::executor::create_settings({.timeout = 10s, .placement_timeout = 10s});
}

int compare(hvactor::runtime& rt, int h) {
  std::vector<results> hier, flat;
  {
    hvactor::executor ex{rt, job_settings(), hosts(h)};
    ex.start();
    hier = ex.run(&collect);
    ex.shutdown();
  }
  {
    hvactor::executor ex{rt, job_settings(), hosts(h, {{"HOROVOD_HIERARCHICAL_ALLREDUCE", "0"}})};
    ex.start();
    flat = ex.run(&collect);
    ex.shutdown();
  }
  for (auto& r : hier)
    say("INFO hierarchical " + r.info);
  for (auto& r : flat)
    say("INFO flat " + r.info);
  bool exact = true, same = true;
  double diff = 0;
  for (size_t r = 0; r < hier.size(); ++r) {
    exact = exact && hier[r].exact == flat[r].exact;
    same = same && hier[r].exact == hier[0].exact && hier[r].floats == hier[0].floats;
    for (size_t i = 0; i < hier[r].floats.size(); ++i)
      diff = std::max(diff, std::abs(hier[r].floats[i] - flat[r].floats[i]));
  }
  say("EXACT " + std::to_string(exact ? 1 : 0));
  say("SAME " + std::to_string(same ? 1 : 0));
  say("FPDIFF " + std::to_string(diff));
  return 0;
}

int permute(hvactor::runtime& rt, int h, int seeds) {
  for (const char* cache : {"on", "off"}) {
    std::map<std::string, std::string> env;
    if (std::string{cache} == "off")
      env["HOROVOD_CACHE_CAPACITY"] = "0";
    hvactor::executor ex{rt, job_settings(), hosts(h, env)};
    ex.start();
    for (int seed = 0; seed < seeds; ++seed) {
      std::vector<path_result> ranks;
      try {
        ranks = ex.run(&permuted_with_info, seed);
      } catch (const hvactor::error& e) {
        say(std::string{"FAILED "} + cache + " " + std::to_string(seed) + " " + e.what());
        break;
      }
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (seed == 0)
          say(std::string{"PATH "} + cache + " " + std::to_string(r) + " " + ranks[r].info);
        say(std::string{"PERMUTED "} + cache + " " + std::to_string(seed) + " " +
            std::to_string(r) + " " + (ranks[r].problems.empty() ? "OK" : ranks[r].problems));
      }
    }
    ex.shutdown();
  }
  return 0;
}

int join_mode(hvactor::runtime& rt, int h) {
  hvactor::executor ex{rt, job_settings(), hosts(h)};
  ex.start();
  std::string workload = "uneven";
  try {
    auto uneven = ex.run(&uneven_with_info, 10);
    for (size_t r = 0; r < uneven.size(); ++r)
      say("PATH " + std::to_string(r) + " " + uneven[r].info);
    for (size_t r = 0; r < uneven.size(); ++r)
      say("UNEVEN " + std::to_string(r) + " " + uneven[r].problems);
    for (int first : {0, 1}) {
      workload = "join_allreduce " + std::to_string(first);
      auto got = ex.run(&hvactor::test::join_allreduce, first);
      for (size_t r = 0; r < got.size(); ++r)
        say("JOIN_ALLREDUCE " + std::to_string(first) + " " + std::to_string(r) + " " + got[r]);
    }
    struct case_ {
      const char* what;
      int joiner;
    };
    for (auto c : {case_{"allgather", 0}, case_{"broadcast", 1}, case_{"barrier", 2}}) {
      workload = std::string{"while_joined "} + c.what;
      auto got = ex.run(&hvactor::test::other_kind_while_joined, c.joiner, std::string{c.what});
      for (size_t r = 0; r < got.size(); ++r)
        say(std::string{"WHILE_JOINED "} + c.what + " " + std::to_string(c.joiner) + " " +
            std::to_string(r) + " " + one_line(got[r]));
    }
  } catch (const hvactor::error& e) {
    say("FAILED " + workload + " " + one_line(e.what()));
  }
  ex.shutdown();
  return 0;
}

int kill_one(hvactor::runtime& rt, int h, int victim, const std::string& dir) {
  hvactor::executor ex{rt, job_settings(), hosts(h)};
  ex.start();
  try {
    ex.run(&hvactor::test::allreduce_until_killed, victim, dir);
  } catch (const hvactor::error& e) {
    say(std::string{"RUN "} + e.what());
  }
  // The survivors report their errors to files; stopping the job before
  // they did would kill them mid-report (the call fails at the victim's
  // death already).
  for (int i = 0; i < 300; ++i) {
    bool all = true;
    for (int r = 0; r < 2 * h; ++r)
      all = all && (r == victim || std::filesystem::exists(dir + "/rank-" + std::to_string(r)));
    if (all)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ex.shutdown();
  return 0;
}

// victim_allreduce.hpp's allreduce_until_stopped_then_killed; every rank
// but those two reports, as in kill_one.
int stop_then_kill(hvactor::runtime& rt, int h, int stopped, int victim, const std::string& dir) {
  hvactor::executor ex{rt, job_settings(), hosts(h)};
  ex.start();
  auto pids = ex.worker_pids();
  try {
    ex.run(&hvactor::test::allreduce_until_stopped_then_killed, stopped, victim, dir);
  } catch (const hvactor::error& e) {
    say(std::string{"RUN "} + e.what());
  }
  for (int i = 0; i < 300; ++i) {
    bool all = true;
    for (int r = 0; r < 2 * h; ++r)
      all = all && (r == victim || r == stopped
                    || std::filesystem::exists(dir + "/rank-" + std::to_string(r)));
    if (all)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ::kill(pids[static_cast<size_t>(stopped)], SIGCONT);
  ex.shutdown();
  return 0;
}

int stall_mode(hvactor::runtime& rt, int h, const std::string& dir) {
  hvactor::executor ex{rt, job_settings(),
                       hosts(h, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1"},
                                 {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "3"}})};
  ex.on_event([](int rank, const std::map<std::string, std::string>& f) {
    if (f.count("event") && f.at("event") == "stall" && f.count("message"))
      say("EVENT " + std::to_string(rank) + " " + one_line(f.at("message")));
  });
  ex.start();
  try {
    auto got = ex.run(&hvactor::test::busy_peer, dir, std::string{"unnamed"}, false);
    for (size_t r = 0; r < got.size(); ++r)
      say("STALL " + std::to_string(r) + " " + one_line(got[r]));
  } catch (const hvactor::error& e) {
    say(std::string{"FAILED stall "} + one_line(e.what()));
  }
  ex.shutdown();
  return 0;
}

int reducescatter_mode(hvactor::runtime& rt, int h) {
  hvactor::executor ex{rt, job_settings(), hosts(h)};
  ex.start();
  auto ranks = ex.run(&hvactor::test::rs::hierarchical_reducescatter);
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto& text = ranks[r];
    auto bar1 = text.find('|'), bar2 = text.rfind('|');
    auto rank = std::to_string(r) + " ";
    say("PATH " + rank + text.substr(0, bar1));
    say("RS " + rank + one_line(text.substr(bar1 + 1, bar2 - bar1 - 1)));
    say("BYTES " + rank + text.substr(bar2 + 1));
  }
  ex.shutdown();
  return 0;
}

int api_mode(hvactor::runtime& rt, int h) {
  hvactor::executor ex{rt, job_settings(), hosts(h)};
  ex.start();
  auto ranks = ex.run(&api_with_info, h);
  for (size_t r = 0; r < ranks.size(); ++r) {
    say("PATH " + std::to_string(r) + " " + ranks[r].info);
    say("API " + std::to_string(r) + " " +
        (ranks[r].problems.empty() ? "OK" : one_line(ranks[r].problems)));
  }
  ex.shutdown();
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    hvactor::runtime rt{argc, argv};
    auto args = rt.args();
    if (args.size() >= 3 && args[1] == "compare") {
      int rc = compare(rt, std::stoi(args[2]));
      say("DONE");
      return rc;
    }
    if (args.size() >= 4 && args[1] == "permute") {
      int rc = permute(rt, std::stoi(args[2]), std::stoi(args[3]));
      say("DONE");
      return rc;
    }
    if (args.size() >= 3 && args[1] == "join") {
      int rc = join_mode(rt, std::stoi(args[2]));
      say("DONE");
      return rc;
    }
    if (args.size() >= 3 && args[1] == "api") {
      int rc = api_mode(rt, std::stoi(args[2]));
      say("DONE");
      return rc;
    }
    if (args.size() >= 3 && args[1] == "reducescatter") {
      int rc = reducescatter_mode(rt, std::stoi(args[2]));
      say("DONE");
      return rc;
    }
    if (args.size() >= 4 && args[1] == "stall") {
      int rc = stall_mode(rt, std::stoi(args[2]), args[3]);
      say("DONE");
      return rc;
    }
    if (args.size() >= 5 && args[1] == "kill") {
      int rc = kill_one(rt, std::stoi(args[2]), std::stoi(args[3]), args[4]);
      say("DONE");
      return rc;
    }
    if (args.size() >= 6 && args[1] == "stop-kill") {
      int rc = stop_then_kill(rt, std::stoi(args[2]), std::stoi(args[3]), std::stoi(args[4]),
                              args[5]);
      say("DONE");
      return rc;
    }
    std::fprintf(stderr, "usage: hier_driver --address A (compare H | permute H SEEDS | join H | "
                         "api H | reducescatter H | stall H DIR | kill H VICTIM DIR | "
                         "stop-kill H STOPPED VICTIM DIR)\n");
    return 2;
  } catch (const std::exception& e) {
    say(std::string{"ERROR "} + e.what());
    return 1;
  }
}
