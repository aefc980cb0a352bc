// The stall inspector as plain code: it warns once something waited the
// warning time, names the tensors and the ranks missing, repeats each
// interval, and gives up at the shutdown time; disabled, it is silent.

#include <chrono>
#include <string>

#include <doctest/doctest.h>

#include "collectives/observe/stall_inspector.hpp"

namespace co = hvactor::collectives;
using namespace std::chrono_literals;

TEST_SUITE("stall inspector") {

TEST_CASE("warns after the warning time, naming tensors and missing ranks, once per interval, "
          "then gives up at the shutdown time") {
  co::stall_inspector s{{.warning = 60s, .shutdown = 300s}, 0, 3};
  auto t0 = co::stall_inspector::clock::now();
  std::vector<co::stall_inspector::waiting> w{{"grad/a", {1, 2}, true, t0},
                                              {"allreduce.noname.0", {}, false, t0 + 30s}};
  CHECK(s.check(t0 + 59s, w).warning.empty());
  CHECK(!s.overdue(t0 + 59s, t0));
  CHECK(s.overdue(t0 + 60s, t0));
  auto v = s.check(t0 + 61s, w);
  CHECK(v.warning.find("'grad/a' (ranks that have not submitted it: 1, 2)") != std::string::npos);
  CHECK(v.warning.find("noname") == std::string::npos); // waited only 31 s
  CHECK(v.summary == "grad/a:1,2");
  CHECK(s.check(t0 + 100s, w).warning.empty()); // within the interval
  v = s.check(t0 + 122s, w);
  CHECK(v.warning.find("'allreduce.noname.0' (ranks that have not submitted it: not known yet)")
        != std::string::npos);
  CHECK(!v.shutdown);
  v = s.check(t0 + 300s, w);
  CHECK(v.shutdown);
  CHECK(v.message.find("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=300") != std::string::npos);
  CHECK(v.message.find("'grad/a'") != std::string::npos);
}

TEST_CASE("without a shutdown time it never gives up; disabled it never warns") {
  co::stall_inspector s{{.warning = 1s}, 1, 2};
  auto t0 = co::stall_inspector::clock::now();
  std::vector<co::stall_inspector::waiting> w{{"x", {0}, true, t0}};
  CHECK(!s.check(t0 + 100000s, w).shutdown);
  co::stall_inspector off{{.disabled = true, .warning = 1s, .shutdown = 2s}, 1, 2};
  auto v = off.check(t0 + 100s, w);
  CHECK(v.warning.empty());
  CHECK(!v.shutdown);
  CHECK(!off.overdue(t0 + 100s, t0));
}

TEST_CASE("hvd::join() is named with the ranks that have not joined, and giving up is kept for "
          "the next round's abort") {
  co::stall_inspector s{{.warning = 1s, .shutdown = 3s}, 0, 3};
  auto t0 = co::stall_inspector::clock::now();
  std::vector<co::stall_inspector::waiting> w{{"hvd::join()", {2}, true, t0, true}};
  auto v = s.check(t0 + 1s, w);
  CHECK(v.warning.find("hvd::join() (ranks that have not joined: 2)") != std::string::npos);
  CHECK(v.summary == "join():2");
  CHECK(!s.gives_up());
  v = s.check(t0 + 3s, w);
  CHECK(v.shutdown);
  CHECK(s.gives_up());
  CHECK(s.shutdown_message() == v.message);
  CHECK(v.message.find("rank 0 of 3 gave up after waiting 3 s") != std::string::npos);
  CHECK(v.message.find("hvd::join() (ranks that have not joined: 2)") != std::string::npos);
}

TEST_CASE("in a process set, messages and events name the job's ranks") {
  co::stall_inspector s{{.warning = 1s, .members = {1, 3, 4}, .process_set = 2}, 1, 3};
  CHECK(s.job_rank() == 3);
  auto t0 = co::stall_inspector::clock::now();
  std::vector<co::stall_inspector::waiting> w{{"grad", {0, 2}, true, t0}};
  auto v = s.check(t0 + 2s, w);
  CHECK(v.warning.find("rank 3 (rank 1 of 3 in process set 2: ranks 1, 3, 4) has waited 2 s")
        != std::string::npos);
  CHECK(v.warning.find("'grad' (ranks that have not submitted it: 1, 4)") != std::string::npos);
  CHECK(v.summary == "grad:1,4");
}

} // TEST_SUITE
