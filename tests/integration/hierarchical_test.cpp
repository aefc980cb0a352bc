// Hierarchical collectives on a real cluster on loopback: 2 and 3
// hvactor-node processes (a head and nodes) with 2 workers each. Shared
// memory inside each node, Gloo across them (hier_driver.cpp runs the
// jobs): the same results as flat Gloo, the path each op took, named async
// allreduces submitted in a different order on every rank paired by name
// (with and without the response cache), and a rank SIGKILLed inside a
// hierarchical allreduce failing every other rank.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "cluster_support.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;

namespace {

std::unique_ptr<process> hier_driver(cluster& c, const std::vector<std::string>& args) {
  std::vector<std::string> argv{HVACTOR_HIER_DRIVER, "--address", c.address()};
  argv.insert(argv.end(), args.begin(), args.end());
  static int n = 0;
  return std::make_unique<process>(argv, c.dir() / ("hier-driver-" + std::to_string(++n)));
}

void finish(process& driver) {
  INFO("driver stdout:\n" << driver.stdout_text() << "\ndriver stderr:\n" << driver.stderr_text());
  REQUIRE(driver.read_line_with("DONE", 120s));
  auto exit = driver.wait_exit(10s);
  REQUIRE(exit);
  CHECK(exit->success());
}

cluster_options nodes(int n) {
  cluster_options o;
  o.node_ids.resize(static_cast<size_t>(n)); // the head and n - 1 nodes
  return o;
}

} // namespace

TEST_SUITE("hierarchical collectives") {

TEST_CASE("on 2 and 3 nodes x 2 workers the hierarchical path gives flat Gloo's integer results "
          "bit for bit and its float averages within rounding, the same on every rank") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    cluster c{nodes(n)};
    auto driver = hier_driver(c, {"compare", std::to_string(n)});
    finish(*driver);
    auto hier = lines_with(*driver, "INFO hierarchical ");
    auto flat = lines_with(*driver, "INFO flat ");
    REQUIRE(hier.size() == static_cast<size_t>(2 * n));
    REQUIRE(flat.size() == static_cast<size_t>(2 * n));
    for (auto& line : hier) {
      CAPTURE(line);
      CHECK(line.find("allreduce: hierarchical, allgather: hierarchical, broadcast: "
                      "hierarchical, barrier: hierarchical")
            != std::string::npos);
      CHECK(line.find(std::to_string(n) + " nodes x 2 ranks") != std::string::npos);
    }
    for (auto& line : flat) {
      CAPTURE(line);
      CHECK(line.find("allreduce: gloo") != std::string::npos);
      CHECK(line.find("HOROVOD_HIERARCHICAL_ALLREDUCE=0") != std::string::npos);
    }
    CHECK(first_line(*driver, "EXACT ") == "1");
    CHECK(first_line(*driver, "SAME ") == "1");
    auto fp = std::stod(first_line(*driver, "FPDIFF "));
    CHECK(fp < 1e-6);
  }
}

TEST_CASE("on 2 and 3 nodes x 2 workers, ranks that submit 60 named async allreduces of mixed "
          "sizes, dtypes and reductions in orders of their own get exact results on the "
          "hierarchical path, with and without the response cache") {
  constexpr int seeds = 10;
  for (int n : {2, 3}) {
    CAPTURE(n);
    cluster c{nodes(n)};
    auto driver = hier_driver(c, {"permute", std::to_string(n), std::to_string(seeds)});
    finish(*driver);
    INFO("driver stdout:\n" << driver->stdout_text());
    CHECK(lines_with(*driver, "FAILED ").empty());
    for (const std::string cache : {"on", "off"}) {
      CAPTURE(cache);
      auto paths = lines_with(*driver, "PATH " + cache + " ");
      REQUIRE(paths.size() == static_cast<size_t>(2 * n));
      for (auto& line : paths) {
        CAPTURE(line);
        CHECK(line.find("allreduce: hierarchical") != std::string::npos);
        CHECK(line.find(std::to_string(n) + " nodes x 2 ranks") != std::string::npos);
      }
      auto runs = lines_with(*driver, "PERMUTED " + cache + " ");
      CHECK(runs.size() == static_cast<size_t>(seeds * 2 * n));
      for (auto& line : runs) {
        CAPTURE(line);
        CHECK(line.substr(line.size() - 3) == " OK");
      }
    }
  }
}

TEST_CASE("a rank SIGKILLed inside a hierarchical allreduce fails every other rank, on its node "
          "and the others, with a collective_error within the timeout") {
  cluster c{nodes(2)};
  auto dir = c.dir() / "kill-reports";
  std::filesystem::create_directories(dir);
  // Rank 1: local rank 1 of the first node; its cross peers are on the other.
  int victim = 1;
  auto driver = hier_driver(c, {"kill", "2", std::to_string(victim), dir.string()});
  finish(*driver);
  REQUIRE(std::filesystem::exists(dir / "killed"));
  auto killed = std::stoll(read_file(dir / "killed"));
  for (int r = 0; r < 4; ++r) {
    if (r == victim)
      continue;
    CAPTURE(r);
    auto report = dir / ("rank-" + std::to_string(r));
    REQUIRE(std::filesystem::exists(report));
    std::istringstream in{read_file(report)};
    std::string kind, what;
    int peer = -2;
    long long at = 0;
    in >> kind >> peer >> at;
    std::getline(in, what);
    CAPTURE(what);
    CHECK(kind == "collective_error");
    CHECK(what.find("failed on rank") != std::string::npos);
    // Within the job's 10 s timeout; in practice milliseconds: every rank
    // that fails leaves its segment and closes its connections.
    CHECK(at - killed < 10'000'000'000LL);
    MESSAGE("rank " << r << " failed " << (at - killed) / 1000000 << " ms after the kill: "
                    << what);
  }
  CHECK(c.no_workers_within(5s));
}

} // TEST_SUITE
