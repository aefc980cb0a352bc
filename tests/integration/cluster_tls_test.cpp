// A mutual-TLS cluster on loopback: certificates made by `hvactor-node
// certs`, a head and a node that require them. Only peers with a
// certificate from the cluster's CA get in; a connection that never speaks
// is dropped by the head's watchdog.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

/// Certificates of the cluster's CA (head, node-a, driver) and of a rogue CA
/// (driver, node-r) in a temp dir.
struct certificates {
  temp_dir dir;
  std::map<std::string, tls_identity> good = make_certs(dir.path() / "ca", {"head", "node-a",
                                                                           "driver"});
  std::map<std::string, tls_identity> rogue = make_certs(dir.path() / "rogue", {"driver",
                                                                               "node-r"});
};

/// A TLS cluster of a head and node-a, 2 CPUs each.
struct tls_cluster {
  certificates certs;
  cluster c{{.node_ids = {"head", "node-a"},
             .tls = {{"head", certs.good.at("head")}, {"node-a", certs.good.at("node-a")}}}};
};

/// Runs a driver with `tls_args` that asks for 4 workers; expects it to run
/// (ranks 0..3 on both nodes) and exit 0.
void check_job_runs(cluster& c, const std::vector<std::string>& tls_args) {
  auto driver = c.driver({"pack", "4"}, tls_args);
  auto done = driver->read_line_with("DONE", 60s);
  auto exit = driver->wait_exit(10s);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(done);
  REQUIRE(exit);
  CHECK(exit->success());
  auto workers = lines_with(*driver, "WORKER ");
  REQUIRE(workers.size() == 4);
  std::map<std::string, int> per_host;
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    auto w = parse_fields(workers[rank]);
    CHECK(w["rank"] == std::to_string(rank));
    CHECK(w["size"] == "4");
    ++per_host[w["host"]];
  }
  CHECK(per_host == std::map<std::string, int>{{"head", 2}, {"node-a", 2}});
  CHECK(all_gone(parse_ints(first_line(*driver, "PIDS")), 5s));
  CHECK(c.no_workers_within(5s));
}

/// Runs a driver with `tls_args`; expects the runtime to refuse to join (an
/// ERROR line starting with `error`, exit 1) and the cluster to stay
/// untouched. By default the error is the head refusing the connection.
void check_driver_refused(cluster& c, const std::vector<std::string>& tls_args,
                          std::string error = "") {
  if (error.empty())
    error = "ERROR error: hvactor::runtime: cannot join the cluster at " + c.address();
  auto driver = c.driver({"pack", "2"}, tls_args);
  auto exit = driver->wait_exit(20s);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(exit);
  CHECK(exit->exited);
  CHECK(exit->code == 1);
  CHECK(driver->stdout_text().find(error) != std::string::npos);
  CHECK(lines_with(*driver, "PIDS").empty());
  auto st = c.status();
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(st.all_free());
  CHECK(st.nodes.size() == 2);
  CHECK(c.worker_processes().empty());
}

/// Starts a node with `tls_args` joining the head; expects it to give up
/// within its --connect-timeout (3 s) with `code` and `error` on stderr, and
/// never be listed. By default the error is the head refusing it.
void check_node_refused(cluster& c, const std::string& id,
                        const std::vector<std::string>& tls_args, int code = 1,
                        const std::string& error = "cannot join the head at") {
  std::vector<std::string> argv{HVACTOR_NODE, "--address", c.address(), "--node-id", id,
                                "--num-cpus", "2", "--work-dir",
                                (c.dir() / ("work-" + id)).string(), "--connect-timeout", "3"};
  argv.insert(argv.end(), tls_args.begin(), tls_args.end());
  auto r = run_command(argv, c.dir() / ("refused-" + id), 20s);
  INFO("node stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.status.exited);
  CHECK(r.status.code == code);
  CHECK(r.elapsed < 7s); // --connect-timeout 3 plus start and stop
  CHECK(r.err.find(error) != std::string::npos);
  CHECK(r.out.find("joined") == std::string::npos);
  auto st = c.status();
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(st.ok());
  CHECK(st.find(id) == nullptr);
  CHECK(st.nodes.size() == 2);
}

/// Connects a plain TCP socket to `address` ("127.0.0.1:PORT"); -1 on failure.
int connect_raw(const std::string& address) {
  auto colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

} // namespace

TEST_SUITE("cluster tls") {

TEST_CASE("a driver with a certificate from the cluster's CA runs a job on a TLS cluster") {
  tls_cluster t;
  auto st = t.c.status();
  INFO("status:\n" << st.result.out << st.result.err);
  REQUIRE(st.ok());
  CHECK(st.nodes.size() == 2);
  check_job_runs(t.c, t.certs.good.at("driver").args());
  CHECK(t.c.wait_for_status([](const cluster_status& s) { return s.all_free(); }, 3s).all_free());
}

TEST_CASE("a driver without a certificate is refused and reserves nothing") {
  tls_cluster t;
  check_driver_refused(t.c, {});
  // status without a certificate is refused as well
  auto st = t.c.status(std::vector<std::string>{});
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(!st.ok());
  CHECK(st.result.status.code == 1);
}

TEST_CASE("a driver and a node with certificates from another CA are refused") {
  tls_cluster t;
  auto& rogue_driver = t.certs.rogue.at("driver");
  SUBCASE("trusting their own CA") {
    check_driver_refused(t.c, rogue_driver.args());
    check_node_refused(t.c, "node-r", t.certs.rogue.at("node-r").args());
  }
  SUBCASE("with the cluster's CA file (refused before connecting)") {
    auto forged = rogue_driver;
    forged.ca = t.certs.good.at("driver").ca;
    check_driver_refused(t.c, forged.args(),
                         "ERROR invalid_argument: TLS certificate " + forged.cert
                           + " does not verify against the CA " + forged.ca);
    auto forged_node = t.certs.rogue.at("node-r");
    forged_node.ca = forged.ca;
    check_node_refused(t.c, "node-r", forged_node.args(), 2,
                       "TLS certificate " + forged_node.cert + " does not verify against the CA");
  }
  check_job_runs(t.c, t.certs.good.at("driver").args());
}

TEST_CASE("a node without certificates cannot join a TLS head") {
  tls_cluster t;
  check_node_refused(t.c, "node-plain", {});
}

TEST_CASE("a TCP client that connects to the TLS head and sends nothing is disconnected within "
          "15 s, and the head keeps serving drivers" * doctest::timeout(45)) {
  tls_cluster t;
  int fd = connect_raw(t.c.address());
  REQUIRE(fd >= 0);
  auto t0 = std::chrono::steady_clock::now();
  pollfd pfd{fd, POLLIN, 0};
  int ready = ::poll(&pfd, 1, 15000);
  char byte = 0;
  auto n = ready > 0 ? ::recv(fd, &byte, 1, 0) : 1;
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  CHECK(ready == 1);
  CHECK(n <= 0); // EOF or reset: the head closed the connection
  CHECK(elapsed < 15s);
  MESSAGE("idle connection dropped after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms");
  // The node's own connection to the head, older than the idle limit now,
  // carries heartbeats and must have survived the watchdog.
  auto st = t.c.status();
  INFO("status:\n" << st.result.out << st.result.err);
  CHECK(st.find("node-a") != nullptr);
  check_job_runs(t.c, t.certs.good.at("driver").args());
}

TEST_CASE("a head on a non-loopback address refuses to start without TLS unless --insecure") {
  temp_dir dir;
  auto refused = run_command({HVACTOR_NODE, "--head", "--bind", "0.0.0.0", "--port", "0",
                              "--node-id", "open", "--work-dir", (dir.path() / "w").string()},
                             dir.path() / "refused", 10s);
  INFO("stderr: " << refused.err);
  CHECK(refused.status.exited);
  CHECK(refused.status.code == 2);
  CHECK(refused.err.find("refusing to listen on 0.0.0.0 without TLS") != std::string::npos);
  CHECK(refused.err.find("--insecure") != std::string::npos);
  // --insecure starts it (and says so); SIGTERM stops it cleanly.
  process head{{HVACTOR_NODE, "--head", "--bind", "0.0.0.0", "--port", "0", "--node-id", "open",
                "--work-dir", (dir.path() / "w").string(), "--insecure"},
               dir.path() / "insecure"};
  CHECK(head.read_line_with("hvactor-node: head 'open' listening on", 10s));
  ::kill(head.pid(), SIGTERM);
  auto exit = head.wait_exit(10s);
  REQUIRE(exit);
  CHECK(exit->success());
  CHECK(head.stderr_text().find("WITHOUT TLS") != std::string::npos);
}

TEST_CASE("a driver refuses to join a non-loopback head without TLS unless --insecure") {
  temp_dir dir;
  // 192.0.2.1 (TEST-NET-1) is never reached: the driver refuses first.
  auto r = run_command({HVACTOR_CLUSTER_DRIVER, "--address", "192.0.2.1:6380", "pack", "1"},
                       dir.path() / "driver", 20s);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status.exited);
  CHECK(r.status.code != 0);
  auto text = r.out + r.err;
  CHECK(text.find("needs a TLS identity") != std::string::npos);
  CHECK(text.find("--insecure") != std::string::npos);
}

} // TEST_SUITE
