// The cluster module (tools/cluster): the hvactor-node command line built by
// the programs that start nodes reads back as the same options in
// hvactor-node itself; the TLS directory layout; the ready lines.

#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "options.hpp"
#include "tools/cluster/node_options.hpp"
#include "tools/cluster/tls_layout.hpp"

using namespace hvactor::cluster;

namespace {

// What hvactor-node would read from `argv` (argv[0] first).
node_options parse(const std::vector<std::string>& argv) {
  cxxopts::Options parser{"hvactor-node"};
  declare_node_options(parser);
  std::vector<const char*> args;
  for (auto& a : argv)
    args.push_back(a.c_str());
  auto res = parser.parse(static_cast<int>(args.size()), args.data());
  return read_node_options(res);
}

} // namespace

TEST_SUITE("cluster module") {

TEST_CASE("a node's command line, as hvactor-run, hvactor-up and the benchmarks build it, is "
          "what hvactor-node reads") {
  node_command c;
  c.binary = "/opt/bin/hvactor-node";
  c.address = "10.0.0.1:6380";
  c.port = 7001;
  c.bind = "127.0.0.1";
  c.node_ip = "127.0.0.1";
  c.node_id = "n-7";
  c.num_cpus = 3;
  c.num_gpus = 2;
  c.work_dir = "/tmp/work";
  c.connect_timeout_s = 12;
  c.exit_on_head_loss = true;
  auto argv = c.argv();
  REQUIRE(argv.front() == "/opt/bin/hvactor-node");
  auto o = parse(argv);
  CHECK(o.command.empty());
  CHECK_FALSE(o.head);
  CHECK(o.address == "10.0.0.1:6380");
  CHECK(o.port == 7001);
  CHECK(o.bind == "127.0.0.1");
  CHECK(o.node_ip == "127.0.0.1");
  CHECK(o.node_id == "n-7");
  CHECK(o.num_cpus == 3);
  CHECK(o.gpu_ids == std::vector<int>{0, 1});
  CHECK(o.work_dir == "/tmp/work");
  CHECK(o.connect_timeout_s == 12);
  CHECK(o.exit_on_head_loss);
}

TEST_CASE("a head's command line with a TLS identity reads back with that identity") {
  tls_layout pki{"/etc/pki-x"};
  node_command c;
  c.head = true;
  c.port = 0;
  c.node_id = "head";
  c.tls = pki.identity("head");
  auto o = parse(c.argv());
  CHECK(o.head);
  CHECK(o.port == 0);
  CHECK(o.tls.enabled());
  CHECK(o.tls.certificate == "/etc/pki-x/head.pem");
  CHECK(o.tls.key == "/etc/pki-x/head.key");
  CHECK(o.tls.cafile == "/etc/pki-x/ca.pem");
}

TEST_CASE("unset fields are not passed: hvactor-node's defaults apply") {
  node_command c;
  c.address = "h:1";
  auto argv = c.argv();
  CHECK(argv == std::vector<std::string>{"hvactor-node", "--address", "h:1"});
}

TEST_CASE("the TLS directory: ca.pem, NAME.pem, NAME.key; a machine gets its own identity and "
          "never the CA's key") {
  tls_layout pki{"/d"};
  CHECK(pki.ca() == "/d/ca.pem");
  CHECK(pki.certificate("n1") == "/d/n1.pem");
  CHECK(pki.key("n1") == "/d/n1.key");
  auto files = pki.handed_out("n1");
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"/d/ca.pem", "/d/n1.key", "/d/n1.pem"});
  tls_layout here{""};
  CHECK(here.ca() == "ca.pem");
  auto args = tls_args(pki.identity("driver"));
  CHECK(args == std::vector<std::string>{"--tls-cert", "/d/driver.pem", "--tls-key",
                                         "/d/driver.key", "--tls-ca", "/d/ca.pem"});
  CHECK(tls_args({}).empty());
}

TEST_CASE("status's command line names the head and carries the identity") {
  auto argv = status_argv("hvactor-node", "h:6380", tls_layout{"/d"}.identity("driver"));
  REQUIRE(argv.size() >= 4);
  CHECK(argv[1] == "status");
  CHECK(std::find(argv.begin(), argv.end(), "h:6380") != argv.end());
  CHECK(std::find(argv.begin(), argv.end(), "/d/driver.pem") != argv.end());
}

TEST_CASE("the ready lines: the head's address, a node's join") {
  CHECK(listening_address("hvactor-node: head 'h' listening on 127.0.0.1:46695 (registry)")
        == "127.0.0.1:46695");
  CHECK_FALSE(listening_address("hvactor-node: head 'h' starting").has_value());
  CHECK(joined_line("hvactor-node: node 'n1' joined 127.0.0.1:6380 and listens on x:1"));
  CHECK_FALSE(joined_line("some output: node 'n1' joined"));
}

TEST_CASE("--include-dashboard takes its value as a word of its own, as Ray's ray start "
          "--include-dashboard false, or after '='; another value names the flag") {
  // As hvactor-node's main parses its words.
  auto head = [](std::vector<std::string> words) {
    cxxopts::Options parser{"hvactor-node"};
    declare_node_options(parser);
    words.insert(words.begin(), "--head");
    return read_node_options(hvactor::tool::parse_options(parser, "hvactor-node", words));
  };
  CHECK_FALSE(head({"--include-dashboard", "false"}).include_dashboard);
  CHECK(head({"--include-dashboard", "true", "--port", "0"}).include_dashboard);
  CHECK_FALSE(head({"--include-dashboard=false"}).include_dashboard);
  CHECK(head({}).include_dashboard);
  try {
    head({"--include-dashboard", "maybe"});
    FAIL("--include-dashboard maybe was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string{e.what()} == "--include-dashboard maybe: must be true or false");
  }
}

} // TEST_SUITE
