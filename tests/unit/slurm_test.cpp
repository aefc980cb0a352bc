// Slurm's environment read without scontrol: host lists and compressed
// counts, with the cases `scontrol show hostnames` gave on this machine
// (notes/slurm.md 4.4), and the allocation hvactor-run derives from them.

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "internal/slurm.hpp"

namespace slurm = hvactor::slurm;
using names = std::vector<std::string>;

TEST_SUITE("slurm environment") {

TEST_CASE("host lists expand as scontrol show hostnames does") {
  CHECK(slurm::expand_hostlist("n[1-3],gpu[08-11]")
        == names{"n1", "n2", "n3", "gpu08", "gpu09", "gpu10", "gpu11"});
  CHECK(slurm::expand_hostlist("rack[1-2]-n[1-2]")
        == names{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(slurm::expand_hostlist("c[1-2]n[3-4]") == names{"c1n3", "c1n4", "c2n3", "c2n4"});
  CHECK(slurm::expand_hostlist("node[001-003]") == names{"node001", "node002", "node003"});
  CHECK(slurm::expand_hostlist("x,y") == names{"x", "y"});
  CHECK(slurm::expand_hostlist("n1") == names{"n1"});
  CHECK(slurm::expand_hostlist("n[1,3-4,9]") == names{"n1", "n3", "n4", "n9"});
  CHECK(slurm::expand_hostlist("a-b.c[9-10]") == names{"a-b.c9", "a-b.c10"});
}

TEST_CASE("malformed host lists are refused with the list and the reason") {
  for (const char* bad : {"a[1,3-4]b", "", "n[1-3", "n1-3]", "n[3-1]", "n[a-b]", "n[]", "n[1-3],,m",
                          "n[[1]]", "n 1", "n[1-99999999]", "[1-2]x[1-300][1-300]"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(slurm::expand_hostlist(bad), doctest::Contains("Invalid hostlist"),
                         std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(slurm::expand_hostlist("n[3-1]"), doctest::Contains("runs backwards"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(slurm::expand_hostlist("n[1-70000]"), doctest::Contains("more than 65536"),
                       std::invalid_argument);
}

TEST_CASE("compressed counts expand; garbage names the variable") {
  CHECK(slurm::expand_counts("2(x3),1", "V") == std::vector<int>{2, 2, 2, 1});
  CHECK(slurm::expand_counts("4", "V") == std::vector<int>{4});
  CHECK(slurm::expand_counts("1,2(x2)", "V") == std::vector<int>{1, 2, 2});
  for (const char* bad : {"", "x", "2(x", "2(x0)", "2(xa)", "-1", "2(x99999999)"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(slurm::expand_counts(bad, "SLURM_TASKS_PER_NODE"),
                         doctest::Contains("SLURM_TASKS_PER_NODE"), std::invalid_argument);
  }
}

TEST_CASE("an allocation's default rank count: tasks, else tasks per node, else GPUs, else "
          "nodes") {
  ::setenv("SLURM_JOB_ID", "42", 1);
  ::setenv("SLURM_JOB_NODELIST", "n[1-3]", 1);
  ::setenv("SLURM_JOB_CPUS_PER_NODE", "2(x3)", 1);
  for (auto* v : {"SLURM_NTASKS", "SLURM_TASKS_PER_NODE", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS"})
    ::unsetenv(v);
  auto a = slurm::allocation_from_env();
  REQUIRE(a);
  CHECK(a->job_id == "42");
  CHECK(a->nodes == names{"n1", "n2", "n3"});
  CHECK(a->cpus == std::vector<int>{2, 2, 2});
  CHECK(a->default_ranks() == 3);
  ::setenv("SLURM_JOB_GPUS", "0,1", 1);
  CHECK(slurm::allocation_from_env()->default_ranks() == 6);
  ::setenv("SLURM_TASKS_PER_NODE", "2,1(x2)", 1);
  CHECK(slurm::allocation_from_env()->default_ranks() == 4);
  ::setenv("SLURM_NTASKS", "5", 1);
  CHECK(slurm::allocation_from_env()->default_ranks() == 5);
  ::setenv("SLURM_JOB_CPUS_PER_NODE", "2(x2)", 1);
  CHECK_THROWS_WITH_AS(slurm::allocation_from_env(), doctest::Contains("SLURM_JOB_CPUS_PER_NODE"),
                       std::invalid_argument);
  ::setenv("SLURM_JOB_NODELIST", "n[1-", 1);
  CHECK_THROWS_WITH_AS(slurm::allocation_from_env(), doctest::Contains("SLURM_JOB_NODELIST"),
                       std::invalid_argument);
  for (auto* v : {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS",
                  "SLURM_TASKS_PER_NODE", "SLURM_JOB_GPUS"})
    ::unsetenv(v);
  CHECK_FALSE(slurm::allocation_from_env());
}

} // TEST_SUITE
