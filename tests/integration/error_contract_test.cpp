// Errors that once vanished on their way through CAF (error kind 0 reads as
// "no error"), each end to end with real processes: a binary that failed to
// ship, a join of a port where no registry is published, a registration the
// coordinator refused.

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "cluster_support.hpp"
#include "actors/protocol/system_config.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

std::string worker_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? v : "";
}

/// The environment variables of this process as `names` see them, set for
/// the lifetime of the object.
struct scoped_env {
  std::vector<std::string> names;
  scoped_env(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (auto& [k, v] : vars) {
      ::setenv(k.c_str(), v.c_str(), 1);
      names.push_back(k);
    }
  }
  ~scoped_env() {
    for (auto& k : names)
      ::unsetenv(k.c_str());
  }
};

} // namespace

TEST_SUITE("error contract") {

TEST_CASE("a driver binary that cannot be shipped fails start() naming the node and the file, "
          "instead of counting as shipped") {
  cluster c{{.node_ids = {"head"}}};
  // A copy, which the driver deletes before start(): the node lacks the
  // binary, and reading it for shipping fails.
  auto copy = c.dir() / "doomed_driver";
  std::filesystem::copy_file(HVACTOR_CLUSTER_DRIVER, copy);
  auto driver = std::make_unique<process>(
    std::vector<std::string>{copy.string(), "--address", c.address(), "--unlink-self", "pack",
                             "1", "--placement-ms", "3000", "--timeout-ms", "5000"},
    c.dir() / "driver");
  auto st = driver->wait_exit(30s);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(st);
  CHECK(st->exited);
  CHECK(st->code == 1);
  auto err = first_line(*driver, "ERROR ");
  CHECK(err.rfind("worker_error: could not ship the driver's binary to node 'head': cannot read "
                  "the driver's binary",
                  0)
        == 0);
  CHECK(err.find("doomed_driver") != std::string::npos);
  CHECK(first_line(*driver, "STARTED").empty());
  CHECK(c.no_workers_within(2s));
  auto status = c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 5s);
  CHECK(status.all_free()); // the reservation was released
}

TEST_CASE("joining a port where no registry is published fails the node with that message") {
  caf::actor_system_config cfg;
  hvactor::configure_system(cfg, 2);
  caf::actor_system sys{cfg};
  // A CAF port of an hvactor process with nothing published on it.
  auto port = sys.middleman().open(0, "127.0.0.1", true);
  REQUIRE(port);
  temp_dir dir;
  auto node = run_command({HVACTOR_NODE, "--address", "127.0.0.1:" + std::to_string(*port),
                           "--node-id", "stray", "--num-cpus", "1", "--work-dir",
                           (dir.path() / "work").string(), "--connect-timeout", "3"},
                          dir.path() / "node", 20s);
  INFO("node stdout:\n" << node.out << "\nstderr:\n" << node.err);
  CHECK(node.status.exited);
  CHECK(node.status.code == 1);
  CHECK(node.err.find("no registry is published there") != std::string::npos);
  CHECK(node.out.find("joined") == std::string::npos);
  sys.middleman().close(*port);
}

TEST_CASE("hvactor-node refuses node ids that could escape its work root or break logs, and "
          "creates nothing") {
  temp_dir dir;
  auto root = dir.path() / "root";
  std::filesystem::create_directories(root);
  std::vector<std::string> bad{"../x", "a/b", "..", "with space", "line\nbreak", "", "-flag",
                               std::string(65, 'n')};
  for (auto& id : bad) {
    CAPTURE(id);
    auto node = run_command({HVACTOR_NODE, "--head", "--port", "0", "--node-id", id,
                             "--num-cpus", "1", "--work-dir", (root / "w").string()},
                            dir.path() / "node", 20s);
    CHECK(node.status.exited);
    CHECK(node.status.code == 2);
    CHECK(node.err.find("node id must be 1-64 characters from A-Z a-z 0-9 . _ -") !=
          std::string::npos);
  }
  CHECK(std::filesystem::is_empty(root));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "x"));
  CHECK_NOTHROW(hvactor::validate_node_id("node-a.rack_7"));
}

TEST_CASE("hvactor-run with an --output-dir it cannot create ends at once with the reason, "
          "never waits for a coordinator that is gone") {
  temp_dir dir;
  auto r = run_command({HVACTOR_RUN, "-np", "2", "--output-dir", "/proc/x/y", "--",
                        HVACTOR_RUN_PROGRAM},
                       dir.path() / "run", 30s);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.status.exited);
  CHECK(r.status.code != 0);
  CHECK(r.elapsed < 10s);
  CHECK(r.err.find("/proc/x/y") != std::string::npos);
}

TEST_CASE("a worker whose registration is refused exits with a clear error, not a crash, and "
          "the job goes on") {
  auto& rt = test_runtime();
  hvactor::executor ex{rt, hvactor::executor::create_settings({.timeout = 10s}),
                       {.num_workers = 1}};
  ex.start();
  auto endpoint = ex.run(&worker_env, std::string{"HVACTOR_WORKER_COORDINATOR"}).at(0);
  REQUIRE(!endpoint.empty());
  temp_dir dir;
  std::unique_ptr<process> intruder;
  {
    // This test binary started as a worker of a job the coordinator does
    // not run: it connects and registers, and is refused.
    scoped_env env{{"HVACTOR_WORKER_COORDINATOR", endpoint},
                   {"HVACTOR_WORKER_JOB", "no-such-job"},
                   {"HVACTOR_WORKER_RANK", "0"},
                   {"HVACTOR_WORKER_NODE", "intruder"},
                   {"HVACTOR_WORKER_TIMEOUT_MS", "5000"}};
    char self[4096] = {0};
    REQUIRE(::readlink("/proc/self/exe", self, sizeof(self) - 1) > 0);
    intruder = std::make_unique<process>(std::vector<std::string>{self}, dir.path() / "intruder");
  }
  auto st = intruder->wait_exit(15s);
  INFO("intruder stderr:\n" << intruder->stderr_text());
  REQUIRE(st);
  CHECK(st->exited); // not a signal (it dereferenced an empty error before)
  CHECK(st->code == 4);
  CHECK(intruder->stderr_text().find(
          "registration with the driver failed: unexpected registration of rank 0 for job "
          "no-such-job")
        != std::string::npos);
  CHECK(ex.run(&worker_env, std::string{"HOROVOD_RANK"}) == std::vector<std::string>{"0"});
  ex.shutdown();
}

} // TEST_SUITE
