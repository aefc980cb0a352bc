// GPU resources on the embedded local cluster without a GPU: the runtime
// offers fake GPU ids 0-3 (--gpu-ids). Workers see horovod.ray's
// CUDA_VISIBLE_DEVICES: the union of their node's assigned ids, in
// local-rank order, comma-joined, no spaces.

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace {

using namespace std::chrono_literals;

hvactor::runtime* rt = nullptr;

std::string visible_devices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "<unset>";
}

std::string local_rank() {
  const char* v = std::getenv("HOROVOD_LOCAL_RANK");
  return v ? v : "?";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(text.substr(start, comma - start));
  out.push_back(text.substr(start));
  return out;
}

std::vector<std::string> devices_of(hvactor::executor_options opts) {
  hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 10s}), opts};
  ex.start();
  auto out = ex.run(&visible_devices);
  ex.shutdown();
  return out;
}

} // namespace

TEST_SUITE("gpu_resources") {

TEST_CASE("the embedded node offers the GPU ids it was given") {
  CHECK(rt->options().num_gpus == 4);
  CHECK(rt->options().gpu_ids == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("num_hosts=1 x num_workers_per_host=4 with use_gpu: one value with 4 entries") {
  auto seen = devices_of({.num_hosts = 1, .num_workers_per_host = 4, .use_gpu = true});
  REQUIRE(seen.size() == 4);
  std::set<std::string> distinct(seen.begin(), seen.end());
  REQUIRE(distinct.size() == 1);
  CHECK(*distinct.begin() == "0,1,2,3");
}

TEST_CASE("num_workers=4 with use_gpu: one value with 4 entries, each local rank among them") {
  hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 10s}),
                       {.num_workers = 4, .use_gpu = true}};
  ex.start();
  auto seen = ex.run(&visible_devices);
  auto ranks = ex.run(&local_rank);
  ex.shutdown();
  std::set<std::string> distinct(seen.begin(), seen.end());
  REQUIRE(distinct.size() == 1);
  auto ids = split_commas(*distinct.begin());
  CHECK(ids.size() == 4);
  for (auto& r : ranks)
    CHECK(std::find(ids.begin(), ids.end(), r) != ids.end());
}

TEST_CASE("gpus_per_worker=2 gives the node's union: 2 x workers entries") {
  auto seen = devices_of({.num_workers = 2, .use_gpu = true, .gpus_per_worker = 2});
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "0,1,2,3");
  CHECK(seen[1] == "0,1,2,3");
}

TEST_CASE("a CPU job's workers get no CUDA_VISIBLE_DEVICES") {
  auto seen = devices_of({.num_workers = 2});
  CHECK(seen == std::vector<std::string>{"<unset>", "<unset>"});
}

TEST_CASE("asking for more GPUs than the node has is a placement_timeout naming them") {
  hvactor::executor ex{*rt,
                       hvactor::executor::create_settings(
                         {.timeout = 10s, .placement_timeout = 1s}),
                       {.num_workers = 3, .use_gpu = true, .gpus_per_worker = 2}};
  try {
    ex.start();
    FAIL("start() placed 6 GPUs on a node with 4");
  } catch (const hvactor::placement_timeout& e) {
    std::string text = e.what();
    CHECK(text.find("GPU: 6") != std::string::npos);
    CHECK(text.find("GPU 4 free of 4") != std::string::npos);
  }
}

} // TEST_SUITE

int main(int argc, char** argv) {
  // In a worker process this never returns: workers run this same binary.
  hvactor::runtime runtime{argc, argv,
                           {.num_cpus = 8, .gpu_ids = {0, 1, 2, 3}, .node_id = "gpu-node"}};
  rt = &runtime;
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
