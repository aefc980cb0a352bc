// Slurm's environment read without scontrol: host lists and compressed
// counts, with the cases `scontrol show hostnames` gave on this machine
// (docs/development/platform-notes.md, "Slurm: host lists as scontrol
// expands them"), and the allocation hvactor-run derives from them.

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "tools/cluster/slurm_env.hpp"

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

namespace {

// Sets exactly `vars` among the Slurm variables allocation_from_env reads,
// and unsets them all again at the end.
class slurm_env {
public:
  explicit slurm_env(std::vector<std::pair<const char*, const char*>> vars) {
    clear();
    for (auto& [k, v] : vars)
      ::setenv(k, v, 1);
  }
  ~slurm_env() {
    clear();
  }

private:
  static void clear() {
    for (auto* v : {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS",
                    "SLURM_TASKS_PER_NODE", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS"})
      ::unsetenv(v);
  }
};

std::string refusal(std::vector<std::pair<const char*, const char*>> vars) {
  slurm_env env{std::move(vars)};
  try {
    slurm::allocation_from_env();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

} // namespace

TEST_CASE("job ids are Slurm's digits, with an array or heterogeneous suffix; anything that "
          "could climb out of a directory is refused naming SLURM_JOB_ID") {
  for (const char* good : {"42", "4294967295", "42_7", "42+1"}) {
    CAPTURE(good);
    CHECK_NOTHROW(slurm::validate_job_id(good, "SLURM_JOB_ID"));
    slurm_env env{{{"SLURM_JOB_ID", good}, {"SLURM_JOB_NODELIST", "n1"}}};
    CHECK(slurm::allocation_from_env()->job_id == good);
  }
  for (const char* bad : {"1/../../victim", "..", "../x", "x", "42_", "_1", "1_2_3", "1+2_3", "42 ",
                          "-1", "4\n2", "123456789012345678901234567890123"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(slurm::validate_job_id(bad, "SLURM_JOB_ID"),
                         doctest::Contains("is not a Slurm job id"), std::invalid_argument);
    auto why = refusal({{"SLURM_JOB_ID", bad}, {"SLURM_JOB_NODELIST", "n1"}});
    CHECK(why.find("SLURM_JOB_ID=") != std::string::npos);
  }
  CHECK(refusal({{"SLURM_JOB_ID", "1/../../victim"}, {"SLURM_JOB_NODELIST", "n1"}})
        == "SLURM_JOB_ID='1/../../victim' is not a Slurm job id (digits, optionally _N for an "
           "array task or +N for a heterogeneous component, at most 32 characters); it names "
           "directories, so nothing else is accepted");
}

TEST_CASE("node names that are not host names are refused naming SLURM_JOB_NODELIST") {
  std::string long_name(65, 'n');
  for (const char* bad : {"n/1", "..", ".hidden", "-n1", "n[1-2]/x", "a/../b", long_name.c_str()}) {
    CAPTURE(bad);
    auto why = refusal({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", bad}});
    CHECK(why.find("SLURM_JOB_NODELIST") != std::string::npos);
    CHECK(why != "(accepted)");
  }
  CHECK(refusal({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n/1"}})
        .find("node name refused") != std::string::npos);
}

TEST_CASE("SLURM_JOB_ID without SLURM_JOB_NODELIST is refused, saying how to run locally; "
          "SLURM_JOB_NODELIST alone is no allocation") {
  auto unset = refusal({{"SLURM_JOB_ID", "42"}});
  CHECK(unset.find("SLURM_JOB_NODELIST is not set") != std::string::npos);
  CHECK(unset.find("unset SLURM_JOB_ID") != std::string::npos);
  CHECK(unset.find("--launcher local") != std::string::npos);
  auto empty = refusal({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", ""}});
  CHECK(empty.find("SLURM_JOB_NODELIST is empty") != std::string::npos);
  slurm_env env{{{"SLURM_JOB_NODELIST", "n1"}}};
  CHECK_FALSE(slurm::allocation_from_env());
}

TEST_CASE("per-node count lists must cover exactly the node list, naming both variables and "
          "counts") {
  CHECK(refusal({{"SLURM_JOB_ID", "42"},
                 {"SLURM_JOB_NODELIST", "n[1-2]"},
                 {"SLURM_TASKS_PER_NODE", "2(x5)"}})
        == "SLURM_TASKS_PER_NODE=2(x5) gives counts for 5 nodes, but SLURM_JOB_NODELIST=n[1-2] "
           "lists 2; they must cover the same nodes");
  CHECK(refusal({{"SLURM_JOB_ID", "42"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                 {"SLURM_TASKS_PER_NODE", "2"}})
          .find("gives counts for 1 node, but SLURM_JOB_NODELIST=n[1-3] lists 3")
        != std::string::npos);
  CHECK(refusal({{"SLURM_JOB_ID", "42"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                 {"SLURM_JOB_CPUS_PER_NODE", "4(x4)"}})
          .find("SLURM_JOB_CPUS_PER_NODE=4(x4) gives counts for 4 nodes")
        != std::string::npos);
  slurm_env env{{{"SLURM_JOB_ID", "42"},
                 {"SLURM_JOB_NODELIST", "n[1-3]"},
                 {"SLURM_TASKS_PER_NODE", "2(x2),1"}}};
  CHECK(slurm::allocation_from_env()->default_ranks() == 5);
}

TEST_CASE("counts are bounded per node and in total, so no product of them overflows") {
  auto with = [](const char* nodes, const char* var, const char* value) {
    return refusal({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", nodes}, {var, value}});
  };
  CHECK(with("n[1-65536]", "SLURM_GPUS_ON_NODE", "999999")
        == "SLURM_GPUS_ON_NODE=999999: must be in 0..1024");
  CHECK(with("n[1-65536]", "SLURM_GPUS_ON_NODE", "1000")
        == "SLURM_GPUS_ON_NODE=1000 GPUs x 65536 nodes make 65536000 ranks, more than the 1048576 "
           "an allocation may have");
  CHECK(with("n[1-65536]", "SLURM_GPUS_ON_NODE", "16") == "(accepted)");
  std::string many_gpus = "0";
  for (int i = 1; i < 2000; ++i)
    many_gpus += "," + std::to_string(i);
  CHECK(with("n1", "SLURM_JOB_GPUS", many_gpus.c_str())
        == "SLURM_JOB_GPUS lists 2000 GPUs, more than 1024 per node");
  CHECK(with("n[1-65536]", "SLURM_TASKS_PER_NODE", "4096(x65536)")
        == "SLURM_TASKS_PER_NODE over 65536 nodes make 268435456 ranks, more than the 1048576 an "
           "allocation may have");
  CHECK(with("n[1-2]", "SLURM_TASKS_PER_NODE", "5000(x2)")
        .find("a node's count 5000 is not in 1..4096") != std::string::npos);
  CHECK(with("n[1-2]", "SLURM_TASKS_PER_NODE", "0(x2)")
        .find("a node's count 0 is not in 1..4096") != std::string::npos);
  CHECK(with("n1", "SLURM_JOB_CPUS_PER_NODE", "0")
        .find("SLURM_JOB_CPUS_PER_NODE=0: a node's count 0") != std::string::npos);
  CHECK(with("n1", "SLURM_NTASKS", "0") == "SLURM_NTASKS=0: must be in 1..1048576");
  CHECK(with("n1", "SLURM_NTASKS", "999999") == "(accepted)");
  CHECK(with("n1", "SLURM_NTASKS", "2000000").find("SLURM_NTASKS=2000000") != std::string::npos);
  // An allocation built by hand is counted in 64 bits too.
  slurm::allocation a;
  a.nodes.assign(65536, "n");
  a.gpus_per_node = 65536;
  CHECK_THROWS_WITH_AS(a.default_ranks(), doctest::Contains("4294967296 ranks"),
                       std::invalid_argument);
}

} // TEST_SUITE
