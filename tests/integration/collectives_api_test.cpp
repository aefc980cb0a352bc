// Horovod's API breadth between real worker processes (issue 31):
// api_workloads.hpp's checks (reducescatter of every dtype over fuzzed
// sizes, scale factors, the async collectives paired by name, grouped
// calls, objects, refusals) at 2, 3 and 4 ranks, over shared memory (one
// node: the default) and over Gloo (HVACTOR_SHM=0). The hierarchical path
// runs the same checks in hierarchical_test.cpp.

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "api_workloads.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

std::string api_everything(int seed) {
  return hvactor::test::api::everything(static_cast<unsigned>(seed));
}

std::string api_path() {
  hvactor::test::hvd_session s;
  return hvd::backend_info();
}

void on_2_3_and_4_ranks(const std::map<std::string, std::string>& env, const char* path) {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 20s,
                                                             .placement_timeout = 20s}),
                         {.num_workers = n, .extra_env_vars = env}};
    ex.start();
    for (auto& info : ex.run(&api_path)) {
      CAPTURE(info);
      CHECK(info.rfind(std::string{"allreduce: "} + path, 0) == 0);
    }
    auto reports = ex.run(&api_everything, 10 + n);
    REQUIRE(reports.size() == static_cast<size_t>(n));
    for (size_t r = 0; r < reports.size(); ++r) {
      CAPTURE(r);
      CHECK_MESSAGE(reports[r].empty(), reports[r]);
    }
    ex.shutdown();
  }
}

} // namespace

TEST_SUITE("hvd API breadth") {

TEST_CASE("reducescatter, scale factors, async and grouped collectives, objects and refusals "
          "give exact results at 2, 3 and 4 ranks over shared memory") {
  on_2_3_and_4_ranks({}, "shm");
}

TEST_CASE("the same over Gloo") {
  on_2_3_and_4_ranks({{"HVACTOR_SHM", "0"}}, "gloo");
}

} // TEST_SUITE
