// hvactor-run on the embedded local cluster with a real SPMD program, and
// hvactor::log::event reaching an executor callback.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <thread>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "../unit/mini_json.hpp"
#include "child_process.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

command_result run(const temp_dir& dir, std::vector<std::string> args,
                   std::chrono::milliseconds timeout = 60s) {
  std::vector<std::string> argv{HVACTOR_RUN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, dir.path() / "run", timeout);
}

void emit_event() {
  hvactor::log::event({{"rank", std::getenv("HOROVOD_RANK")}, {"step", "7"}});
}

// Starts `argv` with stdout into a pipe (its read end in `out`) and stderr
// into `err_path`; returns the pid.
pid_t spawn_into_pipe(std::vector<std::string> argv, const std::string& err_path, int& out) {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(err >= 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (auto& a : argv)
      args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  ::close(err);
  REQUIRE(pid > 0);
  out = fds[0];
  return pid;
}

// hvactor-run writing into a pipe this test reads: stalled for `stall`,
// then drained in 64 KiB reads `pause` apart. Checks that each rank's
// "RANK SEQ" lines (run_program lines) arrive exactly once, in order, and
// returns hvactor-run's peak RSS in KiB (wait4), or -1 when it failed.
long forward_through_pipe(int ranks, int mib, std::chrono::milliseconds stall,
                          std::chrono::microseconds pause, const std::string& err_path) {
  int out = -1;
  pid_t pid = spawn_into_pipe({HVACTOR_RUN, "-np", std::to_string(ranks), "--",
                               HVACTOR_RUN_PROGRAM, "lines", std::to_string(mib)},
                              err_path, out);
  std::this_thread::sleep_for(stall);
  std::vector<long> next(ranks, 0);
  long bad = 0;
  std::string partial;
  std::vector<char> buf(64 << 10);
  auto deadline = std::chrono::steady_clock::now() + 120s;
  for (;;) {
    pollfd pfd{out, POLLIN, 0};
    if (::poll(&pfd, 1, 1000) <= 0) {
      if (std::chrono::steady_clock::now() > deadline)
        break;
      continue;
    }
    ssize_t n = ::read(out, buf.data(), buf.size());
    if (n <= 0)
      break;
    partial.append(buf.data(), static_cast<size_t>(n));
    size_t start = 0;
    for (size_t pos; (pos = partial.find('\n', start)) != std::string::npos; start = pos + 1) {
      int r = -1, r2 = -1;
      long seq = -1;
      // "[1,R]<stdout>:R SEQ xxx"
      if (std::sscanf(partial.c_str() + start, "[1,%d]<stdout>:%d %ld", &r, &r2, &seq) != 3
          || r != r2 || r < 0 || r >= ranks || seq != next[r]++)
        ++bad;
    }
    partial.erase(0, start);
    std::this_thread::sleep_for(pause);
  }
  ::close(out);
  ::kill(pid, SIGKILL); // no-op when it exited
  int status = 0;
  rusage ru{};
  ::wait4(pid, &status, 0, &ru);
  long lines = static_cast<long>(mib) * 1048576 / 100;
  CHECK(bad == 0);
  CHECK(partial.empty());
  for (int r = 0; r < ranks; ++r)
    CHECK(next[r] == lines);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return ru.ru_maxrss;
}

} // namespace

TEST_SUITE("hvactor-run") {

TEST_CASE("output of 2 x 64 MiB through a stalled, then slow reader: every line once and in "
          "order, and hvactor-run's memory stays bounded") {
  temp_dir dir;
  auto err = (dir.path() / "err").string();
  long baseline = forward_through_pipe(2, 0, 0ms, 0us, err);
  REQUIRE(baseline > 0);
  // Stalled for 3 s (the ranks block on their pipes), then read slowly.
  long peak = forward_through_pipe(2, 64, 3s, 200us, err);
  INFO("stderr:\n" << read_file(err));
  MESSAGE("hvactor-run peak RSS: " << peak / 1024 << " MiB (" << baseline / 1024
                                           << " MiB without output)");
  REQUIRE(peak > 0);
  CHECK(peak < baseline + 64 * 1024);
}

TEST_CASE("-np 4 runs the program on 4 ranks and prints each rank's lines whole, tagged with "
          "its rank, and exits 0") {
  temp_dir dir;
  auto r = run(dir, {"-np", "4", "--", HVACTOR_RUN_PROGRAM, "ranks"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 0);
  std::regex tagged{R"(^\[1,(\d)\]<stdout>:rank (\d) of 4 sum 4$)"};
  std::set<std::string> ranks;
  for (auto& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, tagged)) {
      CHECK(m[1] == m[2]);
      ranks.insert(m[1]);
    }
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2", "3"});
  for (int rank = 0; rank < 4; ++rank) {
    auto tag = "[1," + std::to_string(rank) + "]";
    CHECK(r.err.find(tag + "<stderr>:stderr of rank " + std::to_string(rank)) != std::string::npos);
    CHECK(r.out.find(tag + "<event>:loss=0.25 rank=" + std::to_string(rank)) != std::string::npos);
  }
}

TEST_CASE("a rank that exits 3 makes hvactor-run exit 3, naming that rank and its node") {
  temp_dir dir;
  auto r = run(dir, {"-np", "3", "--", HVACTOR_RUN_PROGRAM, "fail", "1"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 3);
  CHECK(r.err.find("one or more processes exited with non-zero status") != std::string::npos);
  CHECK(r.err.find("rank 1 on node '") != std::string::npos);
  CHECK(r.err.find("exit code 3") != std::string::npos);
}

TEST_CASE("--output-dir writes every rank's stdout and stderr to its own files") {
  temp_dir dir;
  auto out = dir.path() / "logs";
  auto r = run(dir, {"-np", "2", "--output-dir", out.string(), "--timestamps", "--",
                     HVACTOR_RUN_PROGRAM, "ranks"});
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    auto d = out / ("rank." + std::to_string(rank));
    CHECK(read_file(d / "stdout").find("rank " + std::to_string(rank) + " of 2")
          != std::string::npos);
    CHECK(read_file(d / "stderr").find("stderr of rank " + std::to_string(rank))
          != std::string::npos);
  }
  // --timestamps: "2026-11-22T01:02:03.456 [1,0]<stdout>:..."
  CHECK(std::regex_search(r.out, std::regex{R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \[1,0\])"}));
}

TEST_CASE("SIGTERM to hvactor-run stops every rank and exits 143") {
  temp_dir dir;
  process launcher{{HVACTOR_RUN, "-np", "3", "--", HVACTOR_RUN_PROGRAM, "sleep"},
                   dir.path() / "run"};
  std::vector<int> pids;
  for (int i = 0; i < 3; ++i) {
    auto line = launcher.read_line_with("[1,", 30s);
    REQUIRE(line);
    auto pos = line->find("pid ");
    REQUIRE(pos != std::string::npos);
    pids.push_back(std::stoi(line->substr(pos + 4)));
  }
  for (int pid : pids)
    CHECK(pid_alive(pid));
  ::kill(launcher.pid(), SIGTERM);
  auto exit = launcher.wait_exit(15s);
  INFO("stderr:\n" << launcher.stderr_text());
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 143);
  CHECK(all_gone(pids, 5s));
}

TEST_CASE("SIGTERM to hvactor-run whose stdout nobody reads still ends it, ranks included, "
          "within 10 s") {
  temp_dir dir;
  auto err_path = (dir.path() / "run.err").string();
  int out = -1;
  pid_t pid = spawn_into_pipe({HVACTOR_RUN, "-np", "2", "--", HVACTOR_RUN_PROGRAM, "lines", "64"},
                              err_path, out);
  std::this_thread::sleep_for(3s); // the pipe is full long before
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  bool ended = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10s);
  auto took = std::chrono::steady_clock::now() - t0;
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(out);
  INFO("stderr:\n" << read_file(err_path));
  CHECK(ended);
  CHECK(took < 10s);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 143);
  // No rank outlives it (they were blocked writing into their pipes).
  auto ranks_left = [] {
    int n = 0;
    std::error_code ec;
    for (auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      std::ifstream comm{entry.path() / "comm"};
      std::string name;
      if (std::getline(comm, name) && name == "run_program")
        ++n;
    }
    return n;
  };
  CHECK(wait_until([&] { return ranks_left() == 0; }, 5s));
}

TEST_CASE("--timeline writes one Chrome trace (valid JSON) with a row of events from every rank") {
  temp_dir dir;
  auto path = dir.path() / "timeline.json";
  auto r = run(dir, {"-np", "3", "--timeline", path.string(), "--", HVACTOR_RUN_PROGRAM, "ranks"});
  INFO("stderr:\n" << r.err);
  REQUIRE(r.status.exited);
  REQUIRE(r.status.code == 0);
  auto trace = json::parse(read_file(path));
  REQUIRE(trace.type == json::kind::array);
  std::set<int> ranks_with_ops;
  for (auto& e : trace.items)
    if (e.str("ph") == "X" && e.str("name").rfind("SHM_ALLREDUCE", 0) == 0)
      ranks_with_ops.insert(static_cast<int>(e.num("pid")));
  CHECK(ranks_with_ops == std::set<int>{0, 1, 2});
}

TEST_CASE("--bind-to core pins each rank to a core of its own (mpirun's --bind-to core); a value "
          "other than core or none is refused") {
  temp_dir dir;
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    MESSAGE("skipped: 2 cores needed");
    return;
  }
  auto r = run(dir, {"-np", "2", "--bind-to", "core", "--", HVACTOR_RUN_PROGRAM, "info"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  REQUIRE(r.status.code == 0);
  std::set<std::string> cores;
  std::istringstream lines{r.out};
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("; bound to core ");
    if (line.find("<stdout>:info rank=") != std::string::npos && at != std::string::npos)
      cores.insert(line.substr(at + 16));
  }
  CHECK(cores.size() == 2);
  auto bad = run(dir, {"-np", "2", "--bind-to", "socket", "--", HVACTOR_RUN_PROGRAM, "info"}, 10s);
  CHECK(bad.status.code == 2);
  CHECK(bad.err.find("--bind-to must be core or none (got 'socket')") != std::string::npos);
}

TEST_CASE("--thread-affinity 1 puts every rank's engine thread on core 1; Horovod's variable with "
          "one id for 2 local ranks warns and runs them unpinned") {
  temp_dir dir;
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    MESSAGE("skipped: 2 cores needed");
    return;
  }
  auto engine_cores = [](const std::string& out) {
    std::vector<std::string> notes;
    std::istringstream lines{out};
    for (std::string line; std::getline(lines, line);)
      if (line.find("<stdout>:info rank=") != std::string::npos) {
        auto at = line.find("; engine thread");
        notes.push_back(at == std::string::npos ? "no engine thread note" : line.substr(at));
      }
    return notes;
  };
  auto r = run(dir, {"-np", "2", "--thread-affinity", "1", "--", HVACTOR_RUN_PROGRAM, "info"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.status.exited);
  REQUIRE(r.status.code == 0);
  CHECK(engine_cores(r.out)
        == std::vector<std::string>(2, "; engine thread on core 1"));
  auto horovods = run(dir, {"-np", "2", "-x", "HOROVOD_THREAD_AFFINITY=1", "--",
                            HVACTOR_RUN_PROGRAM, "info"});
  INFO("stdout:\n" << horovods.out << "\nstderr:\n" << horovods.err);
  REQUIRE(horovods.status.exited);
  REQUIRE(horovods.status.code == 0);
  CHECK(engine_cores(horovods.out)
        == std::vector<std::string>(2, "; engine thread not pinned (HOROVOD_THREAD_AFFINITY='1' "
                                       "names 1 core for 2 local ranks)"));
  CHECK(horovods.err.find("HOROVOD_THREAD_AFFINITY='1' names 1 core for 2 local ranks: the "
                          "engine thread stays unpinned") != std::string::npos);
}

TEST_CASE("bad invocations fail fast with a clear message") {
  temp_dir dir;
  auto none = run(dir, {"-np", "2"}, 10s);
  CHECK(none.status.code == 2);
  CHECK(none.err.find("no program") != std::string::npos);
  auto missing = run(dir, {"-np", "2", "--", "no-such-program-hvactor"}, 10s);
  CHECK(missing.status.code == 2);
  CHECK(missing.err.find("not found in PATH") != std::string::npos);
  auto bad_env = run(dir, {"-np", "2", "-x", "NOVALUE", "--", HVACTOR_RUN_PROGRAM}, 10s);
  CHECK(bad_env.status.code == 2);
  CHECK(bad_env.err.find("-x needs VAR=VALUE") != std::string::npos);
  // Negative or zero counts and times, in both spellings.
  std::vector<std::pair<std::vector<std::string>, std::string>> negatives{
    {{"-np", "-1"}, "-np must be at least 1 (got -1)"},
    {{"-np", "0"}, "-np must be at least 1 (got 0)"},
    {{"-np", "2", "--gpus-per-worker", "-1"}, "--gpus-per-worker must be 0 or more (got -1)"},
    {{"-np", "2", "--cpus-per-worker=-2"}, "--cpus-per-worker must be 0 or more (got -2)"},
    {{"-np", "2", "--timeout", "-5"}, "--timeout must be at least 1 (got -5)"},
    {{"-np", "2", "--timeout=0"}, "--timeout must be at least 1 (got 0)"},
    {{"--num-hosts", "-1", "--per-host", "2"}, "--num-hosts must be at least 1 (got -1)"},
    {{"--num-hosts", "1", "--per-host", "-2"}, "--per-host must be at least 1 (got -2)"},
    {{"-np", "2", "--num-cpus", "-4"}, "--num-cpus must be at least 1 (got -4)"},
    // A value that is not a number names its option (cxxopts said only
    // "Argument 'abc' failed to parse").
    {{"-np", "abc"}, "-np abc: not a number"},
    {{"-np", "2", "--reset-limit", "abc"}, "--reset-limit abc: not a number"},
    {{"-np", "2", "--timeout=1.5x"}, "--timeout=1.5x: not a number"},
    {{"--min-np", "1", "--blacklist-cooldown-range", "a", "b"},
     "--blacklist-cooldown-range a: not a number"},
    {{"--min-np", "1", "--blacklist-cooldown-range", "1", "b"},
     "--blacklist-cooldown-range b: not a number"},
    // Products of counts that overflow an int are refused, not wrapped.
    {{"--num-hosts", "65536", "--per-host", "65536"}, "must be <= 2147483647"},
    // The stall check: whole seconds, a warning time of at least 1, a
    // shutdown time of 0 (never) or at least the warning time (Horovod
    // would silently never shut down), never both on and off.
    {{"-np", "2", "--stall-check-warning-time-seconds", "0"},
     "--stall-check-warning-time-seconds must be at least 1 (got 0)"},
    {{"-np", "2", "--stall-check-warning-time-seconds=-3"},
     "--stall-check-warning-time-seconds must be at least 1 (got -3)"},
    {{"-np", "2", "--stall-check-shutdown-time-seconds", "-1"},
     "--stall-check-shutdown-time-seconds must be 0 or more (got -1)"},
    {{"-np", "2", "--stall-check-warning-time-seconds", "abc"},
     "--stall-check-warning-time-seconds abc: not a number"},
    {{"-np", "2", "--stall-check-shutdown-time-seconds", "1.5"},
     "--stall-check-shutdown-time-seconds 1.5: not a number"},
    {{"-np", "2", "--stall-check-warning-time-seconds", "30", "--stall-check-shutdown-time-seconds",
      "10"},
     "--stall-check-shutdown-time-seconds must be 0 (never) or at least the warning time, 30 s "
     "(--stall-check-warning-time-seconds); got 10"},
    {{"-np", "2", "--stall-check-shutdown-time-seconds", "10"},
     "at least the warning time, 60 s (the default); got 10"},
    {{"-np", "2", "-x", "HOROVOD_STALL_CHECK_TIME_SECONDS=20", "--stall-check-shutdown-time-seconds",
      "10"},
     "at least the warning time, 20 s (-x HOROVOD_STALL_CHECK_TIME_SECONDS); got 10"},
    {{"-np", "2", "--no-stall-check", "--stall-check-warning-time-seconds", "5"},
     "--no-stall-check turns the stall check off: drop --stall-check-warning-time-seconds"},
  };
  for (auto& [args, message] : negatives) {
    auto argv = args;
    argv.insert(argv.end(), {"--", HVACTOR_RUN_PROGRAM});
    auto r = run(dir, argv, 10s);
    INFO(args.front() << " " << args.back() << " stderr:\n" << r.err);
    CHECK(r.status.code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
  // No message repeats its prefix.
  for (auto& r : {none, missing, bad_env})
    CHECK(r.err.find("hvactor-run: hvactor-run:") == std::string::npos);
}

TEST_CASE("the stall-check flags reach every rank as Horovod's variables, over -x's") {
  temp_dir dir;
  // Every rank's "env" line: rank -> VAR -> value ("-": unset).
  auto ranks_env = [&](std::vector<std::string> flags) {
    auto argv = flags;
    argv.insert(argv.end(), {"--", HVACTOR_RUN_PROGRAM, "env", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                             "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_CHECK_DISABLE"});
    auto r = run(dir, argv, 30s);
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    CHECK(r.status.code == 0);
    std::map<std::string, std::map<std::string, std::string>> out;
    for (auto& line : lines_of(r.out)) {
      auto at = line.find("<stdout>:env ");
      if (at == std::string::npos)
        continue;
      std::map<std::string, std::string> vars;
      std::istringstream words{line.substr(at + 13)};
      for (std::string w; words >> w;)
        if (auto eq = w.find('='); eq != std::string::npos)
          vars[w.substr(0, eq)] = w.substr(eq + 1);
      out[vars["rank"]] = vars;
    }
    return out;
  };
  auto timed = ranks_env({"-np", "2", "-x", "HOROVOD_STALL_CHECK_TIME_SECONDS=99",
                          "--stall-check-warning-time-seconds", "5",
                          "--stall-check-shutdown-time-seconds", "20"});
  REQUIRE(timed.size() == 2);
  for (auto& [rank, vars] : timed) {
    CAPTURE(rank);
    CHECK(vars["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "5");
    CHECK(vars["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "20");
    CHECK(vars["HOROVOD_STALL_CHECK_DISABLE"] == "-");
  }
  // A shutdown time measured against -x's warning time (10 < the default 60).
  auto from_x = ranks_env({"-np", "2", "-x", "HOROVOD_STALL_CHECK_TIME_SECONDS=10",
                           "--stall-check-shutdown-time-seconds", "10"});
  REQUIRE(from_x.size() == 2);
  for (auto& [rank, vars] : from_x) {
    CAPTURE(rank);
    CHECK(vars["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "10");
    CHECK(vars["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "10");
  }
  auto off = ranks_env({"-np", "2", "--no-stall-check"});
  REQUIRE(off.size() == 2);
  for (auto& [rank, vars] : off) {
    CAPTURE(rank);
    CHECK(vars["HOROVOD_STALL_CHECK_DISABLE"] == "1");
    CHECK(vars["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "-");
    CHECK(vars["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "-");
  }
}

namespace {

/// Every rank's "env" line for `vars` under hvactor-run `flags`: rank ->
/// VAR -> value ("-": unset).
std::map<std::string, std::map<std::string, std::string>>
ranks_env(const temp_dir& dir, std::vector<std::string> flags, const std::vector<std::string>& vars) {
  auto argv = flags;
  argv.insert(argv.end(), {"--", HVACTOR_RUN_PROGRAM, "env"});
  argv.insert(argv.end(), vars.begin(), vars.end());
  auto r = run(dir, argv, 30s);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.status.code == 0);
  std::map<std::string, std::map<std::string, std::string>> out;
  for (auto& line : lines_of(r.out)) {
    auto at = line.find("<stdout>:env ");
    if (at == std::string::npos)
      continue;
    std::map<std::string, std::string> seen;
    std::istringstream words{line.substr(at + 13)};
    for (std::string w; words >> w;)
      if (auto eq = w.find('='); eq != std::string::npos)
        seen[w.substr(0, eq)] = w.substr(eq + 1);
    out[seen["rank"]] = seen;
  }
  return out;
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out{p};
  out << text;
}

} // namespace

TEST_CASE("horovodrun's flags: -v and -cb print and exit 0; every bad value exits 2 naming the "
          "flag (issue 31)") {
  temp_dir dir;
  auto v = run(dir, {"-v"}, 10s);
  CHECK(v.status.code == 0);
  CHECK(v.out.rfind("hvactor-run 0.", 0) == 0);
  auto cb = run(dir, {"-cb"}, 10s);
  CHECK(cb.status.code == 0);
  CHECK(cb.out.find("Available Tensor Operations:") != std::string::npos);
  CHECK(cb.out.find("[X] Gloo") != std::string::npos);
  CHECK(cb.out.find("[X] Shared memory") != std::string::npos);
  CHECK(cb.out.find("[ ] MPI") != std::string::npos);
  auto yaml = dir.path() / "bad.yaml";
  std::vector<std::pair<std::vector<std::string>, std::string>> bad{
    {{"--fusion-threshold-mb", "-1"}, "--fusion-threshold-mb must be from 0 to 16384 (got -1)"},
    {{"--fusion-threshold-mb", "x"}, "--fusion-threshold-mb x: not a number"},
    {{"--fusion-threshold-mb", "16385"}, "--fusion-threshold-mb must be from 0 to 16384"},
    {{"--cycle-time-ms", "-0.5"}, "--cycle-time-ms must be from 0 to 10000 (got -0.5)"},
    {{"--cycle-time-ms", "1ms"}, "--cycle-time-ms 1ms: not a number"},
    {{"--cache-capacity", "-3"}, "--cache-capacity must be from 0 to 1048576 (got -3)"},
    {{"--hierarchical-allreduce", "--no-hierarchical-allreduce"},
     "--hierarchical-allreduce and --no-hierarchical-allreduce contradict each other"},
    {{"--hierarchical-allgather", "--no-hierarchical-allgather"},
     "--hierarchical-allgather and --no-hierarchical-allgather contradict each other"},
    {{"--timeline-mark-cycles"}, "--timeline-mark-cycles marks cycles in the timeline: give "
                                 "--timeline-filename too"},
    {{"--timeline-filename", ""}, "--timeline-filename must not be empty"},
    {{"--timeline", "a.json", "--timeline-filename", "b.json"},
     "--timeline and --timeline-filename name different files"},
    {{"--output-dir", "a", "--output-filename", "b"},
     "--output-dir and --output-filename name different directories"},
    {{"--log-level", "LOUD"}, "--log-level must be one of TRACE, DEBUG, INFO, WARNING, ERROR, "
                              "FATAL (got 'LOUD')"},
    {{"--start-timeout", "0"}, "--start-timeout must be from 1 to"},
    {{"--start-timeout", "soon"}, "--start-timeout soon: not a number"},
    {{"--gloo-timeout-seconds", "0"}, "--gloo-timeout-seconds must be from 1 to"},
    {{"--thread-affinity", "-1"}, "--thread-affinity must be from 0 to"},
    {{"--network-interface", "no-such-if0"},
     "--network-interface 'no-such-if0': no such network interface on this machine"},
    {{"--network-interfaces", "lo,a b"}, "--network-interface 'a b' is not an interface name"},
    {{"-H", "a:0"}, "-H/--hosts: 'a:0': slots must be a whole number from 1 (host:slots)"},
    {{"-H", "a:x"}, "-H/--hosts: 'a:x': slots must be a whole number from 1"},
    {{"-H", "a,a:2"}, "-H/--hosts: host 'a' is listed twice"},
    {{"--hosts=-oProxyCommand=x:1"}, "is not a host name or address"},
    {{"-H", "a:1", "--hostfile", "h"}, "-H/--hosts and --hostfile both list the hosts: give one"},
    {{"-H", "a:1", "--address", "127.0.0.1:1"}, "-H/--hostfile bring up a cluster of their own"},
    {{"-H", "a:1", "-p", "70000"}, "--ssh-port must be from 1 to 65535 (got 70000)"},
    {{"-H", "a:1,b:1", "-np", "3"}, "-np 3 needs 3 slots but the hosts offer 2"},
    {{"--hostfile", (dir.path() / "none").string()}, "cannot read it"},
    {{"--config-file", (dir.path() / "none.yaml").string()}, "cannot read the config file"},
    {{"--config-file", yaml.string()}, "params.fusion_treshold_mb: unknown key"},
    {{"--autotune", "--no-autotune"}, "--autotune and --no-autotune contradict each other"},
    {{"--autotune", "--autotune-warmup-samples", "-1"},
     "--autotune-warmup-samples must be from 0 to 1000 (got -1)"},
    {{"--autotune", "--autotune-bayes-opt-max-samples", "many"},
     "--autotune-bayes-opt-max-samples many: not a number"},
    {{"--autotune", "--autotune-gaussian-process-noise", "1.5"},
     "--autotune-gaussian-process-noise must be a number in [0, 1] (got '1.5')"},
    {{"--autotune-steps-per-sample", "3"},
     "--autotune-steps-per-sample shapes autotune: give --autotune too"},
    {{"--autotune", "--autotune-log-file", ""}, "--autotune-log-file must not be empty"},
  };
  write_file(yaml, "params:\n  fusion_treshold_mb: 64\n");
  for (auto& [args, message] : bad) {
    auto argv = args;
    if (std::find(argv.begin(), argv.end(), "-np") == argv.end())
      argv.insert(argv.begin(), {"-np", "2"});
    argv.insert(argv.end(), {"--", HVACTOR_RUN_PROGRAM});
    auto r = run(dir, argv, 10s);
    INFO(args.front() << " " << args.back() << " stderr:\n" << r.err);
    CHECK(r.status.code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  }
  // The file's own errors name the key; horovodrun keys hvactor has no
  // setting for are refused, never ignored.
  std::vector<std::pair<std::string, std::string>> files{
    {"params:\n  cycle_time_ms: fast\n", "params.cycle_time_ms: must be a number"},
    {"params:\n  cache_capacity: -1\n", "params.cache_capacity: must be in 0..1048576 (got -1)"},
    {"params:\n  torus_allreduce: true\n", "params.torus_allreduce: horovodrun's NCCL torus"},
    {"controller: mpi\n", "controller: 'mpi': hvactor's controller is Gloo"},
    {"timeline:\n  mark_cycles: maybe\n", "timeline.mark_cycles: must be true or false"},
    {"logging:\n  level: DEBUG\n  level: INFO\n", "logging.level: the key appears twice"},
    {"stall_check: 3\n", "stall_check: must be a mapping"},
    {"- a\n- b\n", "(the document): must be a mapping"},
    {"autotune:\n  warmup_samples: -2\n", "autotune.warmup_samples: must be in 0..1000 (got -2)"},
    {"autotune:\n  gaussian_process_noise: 3\n", "autotune.gaussian_process_noise: must be"},
    {"autotune:\n  speed: 3\n", "autotune.speed: unknown key"},
  };
  for (auto& [text, message] : files) {
    write_file(yaml, text);
    auto r = run(dir, {"-np", "2", "--config-file", yaml.string(), "--", HVACTOR_RUN_PROGRAM}, 10s);
    INFO(text << " stderr:\n" << r.err);
    CHECK(r.status.code == 2);
    CHECK(r.err.find(yaml.string() + ": " + message) != std::string::npos);
  }
}

TEST_CASE("horovodrun's tunables, timeline, log level, timeouts and interfaces reach every rank "
          "as Horovod's variables; --config-file sets them, the command line wins over it") {
  temp_dir dir;
  const std::vector<std::string> vars{
    "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TIMELINE",
    "HOROVOD_TIMELINE_MARK_CYCLES", "HOROVOD_LOG_LEVEL", "HVACTOR_LOG_LEVEL",
    "HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME",
    "HOROVOD_THREAD_AFFINITY", "HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_AUTOTUNE",
    "HOROVOD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
    "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"};
  auto flags = ranks_env(dir,
                         {"-np", "2", "-x", "HOROVOD_CYCLE_TIME=9", "--fusion-threshold-mb", "64",
                          "--cycle-time-ms", "2.5", "--cache-capacity", "0",
                          "--no-hierarchical-allreduce", "--hierarchical-allgather",
                          "--timeline-filename", (dir.path() / "tl.json").string(),
                          "--timeline-mark-cycles", "--log-level", "debug",
                          "--gloo-timeout-seconds", "45", "--start-timeout", "20",
                          "--network-interface", "lo", "--thread-affinity", "1", "--autotune",
                          "--autotune-log-file", (dir.path() / "at.csv").string(),
                          "--autotune-warmup-samples", "2", "--autotune-steps-per-sample", "4",
                          "--autotune-bayes-opt-max-samples", "6",
                          "--autotune-gaussian-process-noise", "0.5"},
                         vars);
  REQUIRE(flags.size() == 2);
  for (auto& [rank, v] : flags) {
    CAPTURE(rank);
    CHECK(v["HOROVOD_FUSION_THRESHOLD"] == std::to_string(64 << 20));
    CHECK(v["HOROVOD_CYCLE_TIME"] == "2.5"); // the flag wins over -x
    CHECK(v["HOROVOD_CACHE_CAPACITY"] == "0");
    CHECK(v["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "0");
    CHECK(v["HOROVOD_HIERARCHICAL_ALLGATHER"] == "1");
    CHECK(v["HOROVOD_TIMELINE"] == (dir.path() / "tl.json").string());
    CHECK(v["HOROVOD_TIMELINE_MARK_CYCLES"] == "1");
    CHECK(v["HOROVOD_LOG_LEVEL"] == "DEBUG");
    CHECK(v["HVACTOR_LOG_LEVEL"] == "debug");
    CHECK(v["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45"); // not --start-timeout's 20
    CHECK(v["HOROVOD_GLOO_IFACE"] == "lo");
    CHECK(v["NCCL_SOCKET_IFNAME"] == "lo");
    CHECK(v["HOROVOD_THREAD_AFFINITY"] == "1,1"); // the core once per local rank
    CHECK(v["HOROVOD_AUTOTUNE"] == "1");
    CHECK(v["HOROVOD_AUTOTUNE_LOG"] == (dir.path() / "at.csv").string());
    CHECK(v["HOROVOD_AUTOTUNE_WARMUP_SAMPLES"] == "2");
    CHECK(v["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"] == "4");
    CHECK(v["HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"] == "6");
    CHECK(v["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] == "0.5");
  }
  // The same from horovodrun's YAML; a flag on the command line wins.
  auto yaml = dir.path() / "hv.yaml";
  write_file(yaml, "controller: gloo\n"
                   "params:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 3\n"
                   "  cache_capacity: 100\n  hierarchical_allreduce: false\n"
                   "timeline:\n  filename: " + (dir.path() / "cfg.json").string() +
                   "\n  mark_cycles: true\n"
                   "stall_check:\n  warning_time_seconds: 7\n"
                   "library_options:\n  gloo_timeout_seconds: 40\n"
                   "logging:\n  level: warning\n"
                   "autotune:\n  enabled: true\n  warmup_samples: 1\n  steps_per_sample: 3\n"
                   "  bayes_opt_max_samples: 5\n  gaussian_process_noise: 0.25\n");
  auto cfg = ranks_env(dir, {"-np", "2", "--config-file", yaml.string(), "--cycle-time-ms", "4"},
                       vars);
  REQUIRE(cfg.size() == 2);
  for (auto& [rank, v] : cfg) {
    CAPTURE(rank);
    CHECK(v["HOROVOD_FUSION_THRESHOLD"] == std::to_string(32 << 20));
    CHECK(v["HOROVOD_CYCLE_TIME"] == "4");
    CHECK(v["HOROVOD_CACHE_CAPACITY"] == "100");
    CHECK(v["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "0");
    CHECK(v["HOROVOD_TIMELINE"] == (dir.path() / "cfg.json").string());
    CHECK(v["HOROVOD_TIMELINE_MARK_CYCLES"] == "1");
    CHECK(v["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "7");
    CHECK(v["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "40");
    CHECK(v["HOROVOD_LOG_LEVEL"] == "WARNING");
    CHECK(v["HOROVOD_AUTOTUNE"] == "1");
    CHECK(v["HOROVOD_AUTOTUNE_WARMUP_SAMPLES"] == "1");
    CHECK(v["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"] == "3");
    CHECK(v["HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES"] == "5");
    CHECK(v["HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE"] == "0.25");
  }
  // A real job over Gloo bound to the named interface, with the tunables.
  auto job = run(dir, {"-np", "2", "--network-interface", "lo", "--fusion-threshold-mb", "1",
                       "--cycle-time-ms", "0.5", "-x", "HVACTOR_SHM=0", "--",
                       HVACTOR_RUN_PROGRAM, "ranks"},
                 30s);
  INFO(job.out << job.err);
  CHECK(job.status.code == 0);
  CHECK(job.out.find("sum 2") != std::string::npos);
}

TEST_CASE("files that would hang hvactor-run are refused at once: an alias bomb in --config-file, "
          "a FIFO as --hostfile, a host file past its bound; a long host file reads in linear "
          "time (issue 53)") {
  temp_dir dir;
  // Every case is an error before any host is contacted or rank started.
  auto refused = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.end(), {"--", HVACTOR_RUN_PROGRAM});
    auto r = run(dir, args, 10s);
    INFO(args[0] << " " << args[1] << " stderr:\n" << r.err);
    CHECK(r.status.code == 2);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(r.elapsed < 8s);
  };
  // 13 lines, 10^12 scalars by reference.
  auto bomb = dir.path() / "bomb.yaml";
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 13; ++i) {
    auto prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 1; k < 10; ++k)
      text += ", " + prev;
    text += "]\n";
  }
  write_file(bomb, text);
  refused({"-np", "2", "--config-file", bomb.string()}, bomb.string() + ": ");
  refused({"-np", "2", "--config-file", bomb.string()}, "alias");
  auto fifo = dir.path() / "hosts.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  refused({"--hostfile", fifo.string()},
          "--hostfile " + fifo.string() + ": cannot read it: not a regular file (a FIFO)");
  refused({"-np", "2", "--config-file", fifo.string()}, "not a regular file (a FIFO)");
  // 17 MiB of comments: past the host file's bound (16 MiB).
  auto huge = dir.path() / "huge.hosts";
  write_file(huge, std::string(17 << 20, '#'));
  refused({"--hostfile", huge.string()}, "cannot read it: larger than 16777216 bytes");
  // 200,000 hosts and one twice: quadratic reading took minutes.
  auto many = dir.path() / "many.hosts";
  std::string hosts;
  for (int i = 0; i < 200000; ++i)
    hosts += "node-" + std::to_string(i) + " slots=2\n";
  write_file(many, hosts + "node-7\n");
  refused({"--hostfile", many.string()}, "host 'node-7' is listed twice");
  std::filesystem::remove(huge);
  std::filesystem::remove(many);
}

TEST_CASE("-x keeps commas in its value and takes a bare VAR from hvactor-run's environment; "
          "slot totals past an int, a config file's bounds and a non-scalar key are named "
          "(issue 53)") {
  temp_dir dir;
  ::setenv("HVACTOR_RUN_TEST_PASSED", "p,q", 1);
  auto env = ranks_env(dir,
                       {"-np", "2", "-x", "NCCL_SOCKET_IFNAME=eth0,ib0", "-x",
                        "HOROVOD_THREAD_AFFINITY=0,1", "-x", "HVACTOR_RUN_TEST_PASSED"},
                       {"NCCL_SOCKET_IFNAME", "HOROVOD_THREAD_AFFINITY", "HVACTOR_RUN_TEST_PASSED"});
  ::unsetenv("HVACTOR_RUN_TEST_PASSED");
  REQUIRE(env.size() == 2);
  for (auto& [rank, v] : env) {
    CAPTURE(rank);
    CHECK(v["NCCL_SOCKET_IFNAME"] == "eth0,ib0");
    CHECK(v["HOROVOD_THREAD_AFFINITY"] == "0,1");
    CHECK(v["HVACTOR_RUN_TEST_PASSED"] == "p,q");
  }
  auto refused = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.end(), {"--", HVACTOR_RUN_PROGRAM});
    auto r = run(dir, args, 10s);
    INFO(args[0] << " " << args[1] << " stderr:\n" << r.err);
    CHECK(r.status.code == 2);
    CHECK(r.err.find(message) != std::string::npos);
  };
  refused({"-np", "2", "-x", "HVACTOR_RUN_TEST_UNSET"},
          "-x needs VAR=VALUE or the name of a variable set here: 'HVACTOR_RUN_TEST_UNSET'");
  // 2,100 hosts of 2^20 slots: 2,202,009,600 in all, past an int.
  auto hostfile = dir.path() / "big.hosts";
  std::string hosts;
  for (int i = 0; i < 2100; ++i)
    hosts += "node-" + std::to_string(i) + " slots=1048576\n";
  write_file(hostfile, hosts);
  refused({"--hostfile", hostfile.string()},
          "--hostfile " + hostfile.string() + ": the hosts offer 2202009600 slots in all, more "
          "than 2147483647");
  // A config file's values are checked against the flags' bounds, and
  // named by the file and the key.
  auto yaml = dir.path() / "hv.yaml";
  write_file(yaml, "autotune:\n  enabled: true\n  warmup_samples: 5000\n");
  refused({"-np", "2", "--config-file", yaml.string()},
          yaml.string() + ": autotune.warmup_samples: must be in 0..1000 (got 5000)");
  write_file(yaml, "autotune:\n  steps_per_sample: 5\n");
  refused({"-np", "2", "--config-file", yaml.string()},
          yaml.string() + ": autotune.steps_per_sample: shapes autotune: set autotune.enabled: "
          "true (or give --autotune)");
  write_file(yaml, "params:\n  ? [fusion_threshold_mb]\n  : 64\n");
  refused({"-np", "2", "--config-file", yaml.string()},
          yaml.string() + ": params: a key must be a name, not a list or a mapping (line 2)");
}

TEST_CASE("a program that cannot be executed is reported naming the rank, node and reason, "
          "without a pid") {
  temp_dir dir;
  auto script = dir.path() / "bad-interpreter";
  {
    std::ofstream f{script};
    f << "#!/no/such/interpreter\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  auto r = run(dir, {"-np", "2", "--", script.string()}, 30s);
  INFO("stderr:\n" << r.err);
  REQUIRE(r.status.exited);
  CHECK(r.status.code == 127);
  CHECK(r.err.find("on node '") != std::string::npos);
  CHECK(r.err.find("could not be started") != std::string::npos);
  CHECK(r.err.find("No such file or directory") != std::string::npos);
  CHECK(r.err.find("pid 0") == std::string::npos);
  CHECK(r.err.find("hvactor-run: hvactor-run:") == std::string::npos);
}

TEST_CASE("hvactor::log::event in every worker reaches the executor's callback with its rank") {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::map<std::string, std::string>> seen;
  hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 20s}),
                       {.num_workers = 3}};
  ex.on_event([&](int rank, const std::map<std::string, std::string>& kv) {
    std::lock_guard<std::mutex> guard{mu};
    seen[rank] = kv;
    cv.notify_all();
  });
  ex.start();
  ex.run(&emit_event);
  {
    std::unique_lock<std::mutex> lock{mu};
    CHECK(cv.wait_for(lock, 10s, [&] { return seen.size() == 3; }));
    for (auto& [rank, kv] : seen) {
      CHECK(kv.at("rank") == std::to_string(rank));
      CHECK(kv.at("step") == "7");
    }
  }
  ex.shutdown();
}

} // TEST_SUITE
