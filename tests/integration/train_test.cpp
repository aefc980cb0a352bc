// hvactor::train end to end: train_driver as a child process on the
// embedded cluster (real worker processes, real rendezvous), and joined to
// a cluster of real hvactor-node processes for checkpoints that cross
// processes as bytes. Also horovod_runner (hr_driver).

#include <sys/stat.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;
namespace fs = std::filesystem;

namespace {

std::string fmt_list(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += x + " ";
  return out;
}

std::string describe(const command_result& r) {
  return "exit " + std::to_string(r.status.code) + " signal " + std::to_string(r.status.signal)
         + "\n--- stdout\n" + r.out + "\n--- stderr\n" + r.err;
}

/// Fields of every stdout line starting with `prefix `.
std::vector<std::map<std::string, std::string>> records(const std::string& out,
                                                        const std::string& prefix) {
  std::vector<std::map<std::string, std::string>> res;
  std::istringstream in{out};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix + " ", 0) == 0)
      res.push_back(parse_fields(line.substr(prefix.size() + 1)));
  return res;
}

/// The rest of the first stdout line starting with `prefix `.
std::string rest_of(const std::string& out, const std::string& prefix) {
  std::istringstream in{out};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix + " ", 0) == 0)
      return line.substr(prefix.size() + 1);
  return {};
}

command_result train(const temp_dir& dir, std::vector<std::string> args,
                     std::chrono::seconds limit = 120s) {
  std::vector<std::string> argv{HVACTOR_TRAIN_DRIVER, "--storage", (dir.path() / "results").string()};
  argv.insert(argv.end(), args.begin(), args.end());
  static int n = 0;
  return run_command(argv, dir.path() / ("driver-" + std::to_string(n++)), limit);
}

/// Scratch dirs of worker processes (hvactor::train unpacks resumed
/// checkpoints there); their colocators remove them with the processes.
std::vector<std::string> worker_scratch_dirs() {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator{fs::temp_directory_path()})
    if (e.path().filename().string().rfind("hvactor-worker-", 0) == 0)
      out.push_back(e.path().string());
  return out;
}

/// The route the bytes take for the drivers this test starts: "1" the
/// same machine's (the driver copies checkpoints, workers map the shard
/// files), "0" the cluster's (HVACTOR_TRAIN_LOCAL_ROUTE=0: everything on
/// the driver's data link).
struct local_route {
  explicit local_route(const char* value) {
    ::setenv("HVACTOR_TRAIN_LOCAL_ROUTE", value, 1);
  }
  ~local_route() {
    ::unsetenv("HVACTOR_TRAIN_LOCAL_ROUTE");
  }
};

/// What the run's directory holds besides its TensorBoard files.
std::vector<std::string> checkpoints(const fs::path& run) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator{run})
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) != 0)
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// The run's TensorBoard files, each as its records' payloads (TFRecord
/// framing: u64 length, 4 bytes, the payload, 4 bytes; event_file_test
/// checks the checksums and the messages).
std::vector<std::vector<std::string>> event_files(const fs::path& run) {
  std::vector<std::vector<std::string>> out;
  for (auto& e : fs::directory_iterator{run}) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) != 0)
      continue;
    std::ifstream in{e.path(), std::ios::binary};
    std::string all{std::istreambuf_iterator<char>{in}, {}};
    auto& records = out.emplace_back();
    for (size_t at = 0; at + 12 <= all.size();) {
      uint64_t n = 0;
      for (int i = 0; i < 8; ++i)
        n |= uint64_t{static_cast<unsigned char>(all[at + static_cast<size_t>(i)])} << (8 * i);
      if (all.size() - at - 12 < n + 4)
        break;
      records.push_back(all.substr(at + 12, n));
      at += 12 + n + 4;
    }
  }
  return out;
}

/// The "shard" lines of train_driver: rank r holds expected[r] = {rows,
/// first x} rows, consecutive with y == 2x, and batches see every row.
void check_shards(const std::string& out,
                  const std::vector<std::pair<std::string, std::string>>& expected) {
  auto shards = records(out, "shard");
  REQUIRE(shards.size() == expected.size());
  for (size_t rank = 0; rank < expected.size(); ++rank) {
    CAPTURE(rank);
    CHECK(shards[rank]["rank"] == std::to_string(rank));
    CHECK(shards[rank]["rows"] == expected[rank].first);
    CHECK(shards[rank]["first"] == expected[rank].second);
    CHECK(shards[rank]["consistent"] == "1");
    CHECK(shards[rank]["batched"] == shards[rank]["rows"]);
  }
}

} // namespace

/// Drivers' shard folders in the temp dir.
std::set<std::string> shard_folders() {
  std::set<std::string> out;
  for (auto& e : fs::directory_iterator{fs::temp_directory_path()})
    if (e.path().filename().string().rfind("hvactor-train-shards-", 0) == 0)
      out.insert(e.path().string());
  return out;
}

/// True when `after` holds no folder that `before` lacks.
bool no_new_folder(const std::set<std::string>& before, const std::set<std::string>& after) {
  for (auto& f : after)
    if (!before.count(f))
      return false;
  return true;
}

TEST_CASE("fit: every rank's reports in order, equal shards, a checkpoint per report") {
  temp_dir dir;
  auto folders = shard_folders();
  auto r = train(dir, {"--workers", "3", "--epochs", "4", "--rows", "100", "--name", "basic"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  // The shard files went with the attempt (a folder of a driver that is
  // gone, left by an earlier test, may have been swept too).
  CHECK(no_new_folder(folders, shard_folders()));
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(history[i]["epoch"] == std::to_string(i));
    CHECK(history[i]["training_iteration"] == std::to_string(i + 1));
    CHECK(history[i]["attempt"] == "0");
    CHECK(history[i]["rank"] == "0");
  }
  // Ray's split(3, equal=True) of 100 rows: 33 each from rows 0, 33, 66;
  // row 99 is dropped.
  check_shards(r.out, {{"33", "0"}, {"33", "33"}, {"33", "66"}});
  CHECK(checkpoints(dir.path() / "results" / "basic")
        == std::vector<std::string>{"checkpoint_000000", "checkpoint_000001", "checkpoint_000002",
                                    "checkpoint_000003"});
  auto ck = parse_fields(rest_of(r.out, "checkpoint"));
  CHECK(ck["epoch"] == "3");
  CHECK(ck["intact"] == "1");
  CHECK(ck["path"] == (dir.path() / "results" / "basic" / "checkpoint_000003").string());
  // Progress: one plain line per report when stdout is a file.
  CHECK(r.out.find("[basic] iter 4 |") != std::string::npos);
  // TensorBoard: one file for the fit, its version record, then an event
  // per report with the numeric metrics (the names travel as they are).
  auto events = event_files(dir.path() / "results" / "basic");
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].size() == 5);
  CHECK(events[0][0].find("brain.Event:2") != std::string::npos);
  for (size_t i = 1; i < 5; ++i) {
    CHECK(events[0][i].find("training_iteration") != std::string::npos);
    CHECK(events[0][i].find("epoch") != std::string::npos);
  }
}

TEST_CASE("a driver killed with SIGTERM leaves its shard folder; the next fit removes it") {
  temp_dir dir;
  auto before = shard_folders();
  process killed{{HVACTOR_TRAIN_DRIVER, "--storage", (dir.path() / "results").string(),
                  "--workers", "2", "--epochs", "30", "--hold-ms", "1000", "--name", "killed"},
                 dir.path() / "killed"};
  REQUIRE(killed.read_line_with("[killed] iter 1 |", 90s));
  std::set<std::string> left;
  for (auto& f : shard_folders())
    if (!before.count(f))
      left.insert(f);
  REQUIRE(left.size() == 1);
  CHECK(left.begin()->find("-" + std::to_string(killed.pid()) + "-") != std::string::npos);
  killed.signal(SIGTERM);
  REQUIRE(killed.wait_exit(30s));
  // No clean-up ran: the folder is still there until the next fit.
  CHECK(fs::exists(*left.begin()));
  auto r = train(dir, {"--workers", "2", "--epochs", "1", "--rows", "10", "--name", "next"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  CHECK_FALSE(fs::exists(*left.begin()));
}

TEST_CASE("dataset_config.equal = false: shards keep every row, sizes within one") {
  // Shards as files of the driver's machine, and on the data link.
  for (auto route : {"1", "0"}) {
    local_route use{route};
    temp_dir dir;
    auto r = train(dir, {"--workers", "3", "--epochs", "1", "--rows", "100", "--equal", "0",
                         "--name", "keep-rows"});
    INFO("HVACTOR_TRAIN_LOCAL_ROUTE=" << std::string{route} << "\n" << describe(r));
    REQUIRE(r.status.success());
    // 100 rows over 3 ranks: 34, 33, 33 from rows 0, 34, 67.
    check_shards(r.out, {{"34", "0"}, {"33", "34"}, {"33", "67"}});
  }
}

TEST_CASE("num_to_keep = 2 keeps the two newest checkpoints") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "2", "--epochs", "5", "--num-to-keep", "2", "--name", "keep"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  CHECK(checkpoints(dir.path() / "results" / "keep")
        == std::vector<std::string>{"checkpoint_000003", "checkpoint_000004"});
  CHECK(parse_fields(rest_of(r.out, "checkpoint"))["epoch"] == "4");
}

TEST_CASE("a worker killed at epoch 2 of 4: max_failures = 1 restarts from checkpoint 1") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "3", "--epochs", "4", "--kill-rank", "1", "--kill-epoch", "2",
                       "--max-failures", "1", "--name", "restart"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 4);
  // Epochs 0 and 1 in the first attempt, then 2 and 3 after the restart
  // from checkpoint_000001 (epoch 1).
  std::vector<std::string> epochs, attempts;
  for (auto& h : history) {
    epochs.push_back(h["epoch"]);
    attempts.push_back(h["attempt"]);
  }
  CHECK(epochs == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(attempts == std::vector<std::string>{"0", "0", "1", "1"});
  CHECK(history[3]["training_iteration"] == "4");
  CHECK(r.out.find("restarting from checkpoint_000001") != std::string::npos);
  CHECK(parse_fields(rest_of(r.out, "checkpoint"))["epoch"] == "3");
}

TEST_CASE("a 4 GiB sparse checkpoint with odd names arrives intact, copied and streamed") {
  for (auto route : {"1", "0"}) {
    local_route use{route};
    temp_dir dir;
    auto r = train(dir, {"--workers", "2", "--epochs", "2", "--sparse-gib", "4", "--name", "big"});
    INFO("HVACTOR_TRAIN_LOCAL_ROUTE=" << std::string{route} << "\n" << describe(r));
    REQUIRE(r.status.success());
    auto ck = parse_fields(rest_of(r.out, "checkpoint"));
    CHECK(ck["intact"] == "1");
    CHECK(ck["epoch"] == "1");
    CHECK(checkpoints(dir.path() / "results" / "big")
          == std::vector<std::string>{"checkpoint_000000", "checkpoint_000001"});
    // Still sparse on the driver's side.
    auto sparse = dir.path() / "results" / "big" / "checkpoint_000001" / "sub" / "sparse ñandú.bin";
    struct stat st{};
    REQUIRE(::stat(sparse.c_str(), &st) == 0);
    CHECK(st.st_blocks * 512 < (64 << 20));
  }
}

TEST_CASE("rank 0 killed mid-transfer: no partial checkpoint stays, the fit resumes from the last") {
  // Copied by the driver, and uploaded on the data link.
  for (auto route : {"1", "0"}) {
    local_route use{route};
    INFO("HVACTOR_TRAIN_LOCAL_ROUTE=" << std::string{route});
    temp_dir dir;
    // 256 MiB: the transfer takes longer than the 150 ms before the kill.
    auto r = train(dir, {"--workers", "2", "--epochs", "3", "--ckpt-bytes",
                         std::to_string(256 << 20), "--kill-mid-report-epoch", "1",
                         "--max-failures", "1", "--name", "midway"});
    INFO(describe(r));
    REQUIRE(r.status.success());
    CHECK(r.out.find("restarting from checkpoint_000000") != std::string::npos);
    auto history = records(r.out, "history");
    REQUIRE(history.size() == 3);
    CHECK(history[1]["attempt"] == "1");
    auto ck = parse_fields(rest_of(r.out, "checkpoint"));
    CHECK(ck["intact"] == "1");
    CHECK(ck["epoch"] == "2");
    CHECK(checkpoints(dir.path() / "results" / "midway")
          == std::vector<std::string>{"checkpoint_000000", "checkpoint_000001",
                                      "checkpoint_000002"});
  }
}

TEST_CASE("storage_path on a full disk: a clear error, the checkpoints before it intact") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a small tmpfs needs root");
    return;
  }
  for (auto route : {"1", "0"}) {
    local_route use{route};
    INFO("HVACTOR_TRAIN_LOCAL_ROUTE=" << std::string{route});
    temp_dir dir;
    // The run's directory only: the loop's own scratch is under results/ too.
    auto small = dir.path() / "results" / "full";
    fs::create_directories(small);
    // 48 MiB: the first 40 MiB checkpoint fits, the second does not.
    REQUIRE(run_command({"/usr/bin/mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", small.string()},
                        dir.path() / "mount", 10s)
              .status.success());
    struct unmount {
      fs::path at;
      ~unmount() {
        std::string cmd = "/usr/bin/umount -l '" + at.string() + "'";
        (void)std::system(cmd.c_str());
      }
    } unmount_at_exit{small};
    auto r = train(dir, {"--workers", "2", "--epochs", "2", "--ckpt-bytes",
                         std::to_string(40 << 20), "--name", "full"});
    INFO(describe(r));
    CHECK(r.status.code == 1);
    auto err = rest_of(r.out, "error");
    CHECK(err.find("checkpoint of report 2 refused") != std::string::npos);
    CHECK(err.find("No space left on device") != std::string::npos);
    CHECK(checkpoints(small) == std::vector<std::string>{"checkpoint_000000"});
    CHECK(fs::file_size(small / "checkpoint_000000" / "sub" / "payload") == (40u << 20));
  }
}

TEST_CASE("a worker killed with max_failures = 0 fails the fit with the worker's error") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "3", "--epochs", "4", "--kill-rank", "1", "--kill-epoch", "2",
                       "--name", "fail"});
  INFO(describe(r));
  CHECK(r.status.code == 1);
  auto err = rest_of(r.out, "error");
  CHECK(err.find("rank 1") != std::string::npos);
  CHECK(err.find("signal 9") != std::string::npos);
  CHECK(records(r.out, "history").size() == 2);
  // The checkpoints persisted before the failure stay.
  CHECK(parse_fields(rest_of(r.out, "checkpoint"))["epoch"] == "1");
}

TEST_CASE("a loop that throws: its text is the fit's error after max_failures restarts") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "2", "--epochs", "3", "--throw-rank", "0", "--throw-epoch",
                       "1", "--max-failures", "2", "--name", "throws"});
  INFO(describe(r));
  CHECK(r.status.code == 1);
  CHECK(rest_of(r.out, "error").find("boom at epoch 1") != std::string::npos);
  // Three attempts: the first reports epoch 0, then fails at epoch 1; both
  // restarts resume after checkpoint 0 and fail at epoch 1 again.
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 1);
  CHECK(history[0]["epoch"] == "0");
  CHECK(r.out.find("failure 2 of 2") != std::string::npos);
  // The restarted workers unpacked checkpoint 0 into their scratch dirs;
  // the ones stopped at shutdown never cleaned up themselves.
  bool cleaned = wait_until([] { return worker_scratch_dirs().empty(); }, 5s);
  INFO(fmt_list(worker_scratch_dirs()));
  CHECK(cleaned);
}

TEST_CASE("resume_from_checkpoint continues the epoch count in a new run") {
  temp_dir dir;
  auto first = train(dir, {"--workers", "2", "--epochs", "2", "--name", "a"});
  INFO(describe(first));
  REQUIRE(first.status.success());
  auto from = (dir.path() / "results" / "a" / "checkpoint_000001").string();
  auto r = train(dir, {"--workers", "2", "--epochs", "4", "--name", "b", "--resume", from});
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 2);
  CHECK(history[0]["epoch"] == "2");
  CHECK(history[1]["epoch"] == "3");
  CHECK(checkpoints(dir.path() / "results" / "b")
        == std::vector<std::string>{"checkpoint_000000", "checkpoint_000001"});
}

TEST_CASE("a rank that reports fewer times than the others: a clear error, no hang") {
  temp_dir dir;
  auto t0 = std::chrono::steady_clock::now();
  auto r = train(dir, {"--workers", "2", "--epochs", "3", "--short-rank", "1", "--name", "short"});
  INFO(describe(r));
  CHECK(r.status.code == 1);
  CHECK(rest_of(r.out, "error").find("same number of times") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 60s);
}

TEST_CASE("reports without a checkpoint are queued: all arrive in order; a short rank and a "
          "refused report fail the fit when the loop returns") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "3", "--epochs", "4", "--metrics-only", "1", "--name", "mo"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(history[i]["epoch"] == std::to_string(i));
    CHECK(history[i]["training_iteration"] == std::to_string(i + 1));
  }
  CHECK(records(r.out, "shard").size() == 3); // every rank's last report
  CHECK(checkpoints(dir.path() / "results" / "mo").empty());

  auto t0 = std::chrono::steady_clock::now();
  auto s = train(dir, {"--workers", "2", "--epochs", "3", "--short-rank", "1", "--metrics-only",
                       "1", "--name", "mo-short"});
  INFO(describe(s));
  CHECK(s.status.code == 1);
  CHECK(rest_of(s.out, "error").find("same number of times") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 60s);

  // Rank 1's last report carries 17 MiB of metrics: the driver refuses it,
  // and the loop's end (report() had returned) fails the call with why.
  auto b = train(dir, {"--workers", "2", "--epochs", "2", "--big-metric-rank", "1",
                       "--metrics-only", "1", "--name", "mo-big"});
  INFO(describe(b));
  CHECK(b.status.code == 1);
  CHECK(rest_of(b.out, "error").find("bytes of metrics") != std::string::npos);
}

TEST_CASE("invalid trainer options throw before any worker starts") {
  temp_dir dir;
  auto r = train(dir, {"--workers", "0"});
  CHECK(r.status.code == 2);
  CHECK(rest_of(r.out, "thrown").find("num_workers must be >= 1: Got 0.") != std::string::npos);
  r = train(dir, {"--workers", "2", "--resume", (dir.path() / "missing").string()});
  CHECK(r.status.code == 2);
  CHECK(rest_of(r.out, "thrown").find("is not a directory") != std::string::npos);
  r = train(dir, {"--workers", "2", "--max-failures", "-2"});
  CHECK(rest_of(r.out, "thrown").find("max_failures must be >= -1") != std::string::npos);
}

TEST_CASE("checkpoints of a rank 0 on another node arrive intact (hvactor-node cluster)") {
  cluster c{{.node_ids = {"head", "n1", "n2"}, .cpus_per_node = 1}};
  temp_dir dir;
  // As between machines: streamed, not copied by the driver.
  local_route streamed{"0"};
  // 9 MiB + 5 bytes: three chunks of the stream's 4 MiB.
  auto r = run_command({HVACTOR_TRAIN_DRIVER, "--address", c.address(), "--storage",
                        (dir.path() / "results").string(), "--workers", "3", "--epochs", "2",
                        "--ckpt-bytes", std::to_string((9 << 20) + 5), "--name", "remote"},
                       dir.path() / "remote", 180s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto shards = records(r.out, "shard");
  REQUIRE(shards.size() == 3);
  std::set<std::string> hosts;
  for (auto& s : shards)
    hosts.insert(s["host"]);
  CHECK(hosts == std::set<std::string>{"head", "n1", "n2"});
  auto ck = parse_fields(rest_of(r.out, "checkpoint"));
  CHECK(ck["intact"] == "1");
  CHECK(ck["epoch"] == "1");
  CHECK(fs::file_size(fs::path{ck["path"]} / "sub" / "payload") == (9u << 20) + 5);
  CHECK(c.no_workers_within(10s));
}

TEST_CASE("reports with inf, -inf, NaN and subnormal metrics reach the head; fit returns them") {
  // The driver sends every report's metrics to the head's registry as a
  // CAF message: CAF's own float format never returns for an infinity,
  // which silenced the driver for good (the head dropped it, fit() hung).
  cluster c{{.node_ids = {"head"}, .cpus_per_node = 2}};
  temp_dir dir;
  auto r = run_command({HVACTOR_TRAIN_DRIVER, "--address", c.address(), "--storage",
                        (dir.path() / "results").string(), "--workers", "2", "--epochs", "2",
                        "--metrics-only", "1", "--odd-floats", "1", "--name", "odd"},
                       dir.path() / "odd", 60s);
  INFO(describe(r));
  REQUIRE(r.status.success());
  auto history = records(r.out, "history");
  REQUIRE(history.size() == 2);
  for (auto& h : history) {
    CHECK(h["inf"] == "inf");
    CHECK(h["ninf"] == "-inf");
    CHECK(h["nan"] == "nan");
    CHECK(h["tiny"] == "4.94066e-324");
  }
  // The head decoded both reports and still answers.
  CHECK(c.status().ok());
  CHECK(c.no_workers_within(10s));
}

// -- horovod_runner -----------------------------------------------------------------

namespace {

command_result hr(const temp_dir& dir, std::vector<std::string> args) {
  std::vector<std::string> argv{HVACTOR_HR_DRIVER};
  argv.insert(argv.end(), args.begin(), args.end());
  static int n = 0;
  return run_command(argv, dir.path() / ("hr-" + std::to_string(n++)), 120s);
}

} // namespace

TEST_CASE("horovod_runner np = 2 and np = -2 return rank 0's value; 'all' tags every line") {
  temp_dir dir;
  for (auto np : {"2", "-2"}) {
    CAPTURE(np);
    auto r = hr(dir, {"--np", np});
    INFO(describe(r));
    REQUIRE(r.status.success());
    CHECK(rest_of(r.out, "result") == "value=7 size=2");
    CHECK(r.out.find("[1,0]<stdout>:hello from rank 0 of 2") != std::string::npos);
    CHECK(r.out.find("[1,1]<stdout>:hello from rank 1 of 2") != std::string::npos);
    CHECK(r.err.find("[1,1]<stderr>:warning from rank 1") != std::string::npos);
    CHECK(r.out.find("[1,1]<event>:rank=1 step=done") != std::string::npos);
  }
}

TEST_CASE("horovod_runner log_callback_only: only hvactor::log::event records reach the driver") {
  temp_dir dir;
  auto r = hr(dir, {"--np", "2", "--verbosity", "log_callback_only"});
  INFO(describe(r));
  REQUIRE(r.status.success());
  CHECK(rest_of(r.out, "result") == "value=7 size=2");
  CHECK(r.out.find("[1,0]<event>:rank=0 step=done") != std::string::npos);
  CHECK(r.out.find("[1,1]<event>:rank=1 step=done") != std::string::npos);
  CHECK(r.out.find("hello from") == std::string::npos);
  CHECK(r.err.find("warning from") == std::string::npos);
}

TEST_CASE("horovod_runner: np = 0, np beyond the driver's CPUs, a bad verbosity are errors") {
  temp_dir dir;
  auto r = hr(dir, {"--np", "0"});
  CHECK(r.status.code == 2);
  CHECK(r.out.find("np must be > 0") != std::string::npos);
  r = hr(dir, {"--np", "-1000"});
  CHECK(r.status.code == 2);
  CHECK(r.out.find("np = -1000 asks for 1000 processes on the driver's machine") != std::string::npos);
  // INT_MIN: its negation does not fit an int (it passed, then failed later
  // with "num_workers must be >= 1: Got -2147483648.").
  r = hr(dir, {"--np", "-2147483648"});
  CHECK(r.status.code == 2);
  CHECK(r.out.find("np = -2147483648 asks for 2147483648 processes on the driver's machine")
        != std::string::npos);
  r = hr(dir, {"--np", "2", "--verbosity", "loud"});
  CHECK(r.status.code == 2);
  CHECK(r.out.find("driver_log_verbosity must be") != std::string::npos);
}

TEST_CASE("horovod_runner on a joined cluster: np = 2 on its nodes, np = -2 on the driver only") {
  cluster c{{.node_ids = {"head", "n1"}, .cpus_per_node = 1}};
  temp_dir dir;
  auto on_cluster = hr(dir, {"--address", c.address(), "--np", "2"});
  INFO(describe(on_cluster));
  REQUIRE(on_cluster.status.success());
  CHECK(rest_of(on_cluster.out, "result") == "value=7 size=2");
  CHECK(on_cluster.out.find("[1,0]<event>:host=head rank=0") != std::string::npos);
  CHECK(on_cluster.out.find("[1,1]<event>:host=n1 rank=1") != std::string::npos);

  auto local = hr(dir, {"--address", c.address(), "--np", "-2"});
  INFO(describe(local));
  REQUIRE(local.status.success());
  auto host = parse_fields(rest_of(local.out, "driver"))["host"];
  REQUIRE(!host.empty());
  CHECK(rest_of(local.out, "result") == "value=7 size=2");
  CHECK(local.out.find("[1,0]<event>:host=" + host + " rank=0") != std::string::npos);
  CHECK(local.out.find("[1,1]<event>:host=" + host + " rank=1") != std::string::npos);
  CHECK(local.out.find("[1,1]<stdout>:hello from rank 1 of 2") != std::string::npos);
  CHECK(c.no_workers_within(10s));
}
