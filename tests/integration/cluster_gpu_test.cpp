// GPU resources on a real cluster without a GPU: hvactor-node processes
// offering fake GPU ids (--num-gpus 4). What a job sees in
// CUDA_VISIBLE_DEVICES is what horovod.ray hands out: per node, the union of
// the ids assigned to its workers, in local-rank order, comma-joined.

#include <algorithm>
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

struct gpu_job {
  std::map<std::string, std::set<std::string>> cvd_by_host; // node id -> values seen
  std::vector<std::map<std::string, std::string>> workers;
};

gpu_job run_gpu_job(cluster& c, const std::vector<std::string>& args) {
  auto driver = c.driver(args);
  INFO("driver stdout:\n" << driver->stdout_text() << "\nstderr:\n" << driver->stderr_text());
  REQUIRE(driver->read_line_with("DONE", 60s));
  auto exit = driver->wait_exit(10s);
  REQUIRE(exit);
  REQUIRE(exit->success());
  gpu_job job;
  for (auto& line : lines_with(*driver, "WORKER ")) {
    auto w = parse_fields(line);
    job.cvd_by_host[w["host"]].insert(w["cvd"]);
    job.workers.push_back(w);
  }
  return job;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(text.substr(start, comma - start));
  out.push_back(text.substr(start));
  return out;
}

} // namespace

TEST_SUITE("cluster_gpu") {

TEST_CASE("num_hosts=3 x 2 workers with gpus_per_worker=2 gives each node one value listing its "
          "4 assigned ids, in local-rank order") {
  cluster c{{.cpus_per_node = 2, .gpus_per_node = 4}};
  auto job = run_gpu_job(c, {"hosts", "3", "2", "--gpus-per-worker", "2"});
  REQUIRE(job.workers.size() == 6);
  REQUIRE(job.cvd_by_host.size() == 3);
  for (auto& [host, values] : job.cvd_by_host) {
    INFO("node " << host);
    REQUIRE(values.size() == 1); // both workers of the node see the same devices
    CHECK(*values.begin() == "0,1,2,3");
  }
}

TEST_CASE("num_workers=4 with use_gpu packs onto one node: one CUDA_VISIBLE_DEVICES value with 4 "
          "entries, and each worker's local rank is one of them") {
  cluster c{{.cpus_per_node = 4, .gpus_per_node = 4}};
  auto job = run_gpu_job(c, {"pack", "4", "--gpus-per-worker", "1"});
  REQUIRE(job.workers.size() == 4);
  REQUIRE(job.cvd_by_host.size() == 1);
  auto& values = job.cvd_by_host.begin()->second;
  REQUIRE(values.size() == 1);
  auto ids = split_commas(*values.begin());
  CHECK(ids.size() == 4);
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == 4);
  for (auto& w : job.workers)
    CHECK(std::find(ids.begin(), ids.end(), w["local_rank"]) != ids.end());
}

TEST_CASE("GPUs in use by one job are not handed to the next: a second job gets the remaining "
          "ids, and asking for more than exist is a placement_timeout naming free GPUs") {
  cluster c{{.node_ids = {"head"}, .cpus_per_node = 8, .gpus_per_node = 4}};
  auto holder = c.driver({"hold", "1", "20", "--gpus-per-worker", "3"});
  REQUIRE(holder->read_line_with("STARTED", 30s));
  auto st = c.wait_for_status([](const cluster_status& s) { return s.ok(); }, 5s);
  auto driver = c.driver({"pack", "1", "--gpus-per-worker", "2", "--placement-ms", "1500"});
  auto error = driver->read_line_with("ERROR placement_timeout:", 20s);
  INFO("driver stdout:\n" << driver->stdout_text());
  REQUIRE(error);
  CHECK(error->find("GPU: 2") != std::string::npos);  // the request
  CHECK(error->find("GPU 1 free of 4") != std::string::npos);
  auto fits = run_gpu_job(c, {"pack", "1", "--gpus-per-worker", "1"});
  REQUIRE(fits.workers.size() == 1);
  CHECK(fits.workers[0]["cvd"] == "3"); // ids 0-2 belong to the holder
  holder->kill();
}

} // TEST_SUITE
