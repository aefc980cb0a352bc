// hvactor-run in Slurm mode, run as a real process with a made-up
// allocation in its environment and a stand-in srun that fails at once: what
// it refuses, what it leaves behind, and how long it takes to get to srun.
// The emulated Slurm cluster (tests/slurm/slurm_test.sh) covers real runs.

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "child_process.hpp"

using namespace std::chrono_literals;
using namespace hvactor::test;
namespace fs = std::filesystem;

namespace {

// An IPv4 address of this machine other than loopback (hvactor-run --bind
// it: off loopback the job is mutual TLS, with a per-job directory in HOME),
// or empty.
std::string non_loopback_address() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0)
    return {};
  std::string found;
  for (auto* i = all; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)
        || (i->ifa_flags & IFF_LOOPBACK))
      continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr)
      found = text;
  }
  ::freeifaddrs(all);
  return found;
}

std::set<std::string> entries(const fs::path& dir) {
  std::set<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    out.insert(fs::relative(e.path(), dir).string());
  return out;
}

// A home with a directory worth keeping, a TMPDIR, and a stand-in srun that
// fails as srun does when it cannot reach the controller.
struct sandbox {
  temp_dir root;
  fs::path home = root.path() / "home";
  fs::path tmp = root.path() / "tmp";
  fs::path bin = root.path() / "bin";

  sandbox() {
    fs::create_directories(home / "victim" / "data");
    std::ofstream{home / "victim" / "data" / "precious"} << "keep";
    fs::create_directories(home / "sibling");
    fs::create_directories(tmp);
    fs::create_directories(bin);
    std::ofstream{bin / "srun"} << "#!/bin/sh\necho 'srun: error: stand-in srun of the test' >&2\n"
                                   "exit 1\n";
    fs::permissions(bin / "srun", fs::perms::owner_all);
  }

  // hvactor-run with the allocation `vars` and nothing else of Slurm's.
  command_result run(std::vector<std::string> vars, std::vector<std::string> args,
                     std::chrono::milliseconds timeout = 60s) const {
    std::vector<std::string> argv{"/usr/bin/env"};
    for (auto* v : {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_JOB_CPUS_PER_NODE", "SLURM_NTASKS",
                    "SLURM_TASKS_PER_NODE", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS",
                    "HVACTOR_ADDRESS"})
      argv.insert(argv.end(), {"-u", v});
    const char* path = std::getenv("PATH");
    argv.push_back("PATH=" + bin.string() + ":" + (path ? path : "/usr/bin:/bin"));
    argv.push_back("HOME=" + home.string());
    argv.push_back("TMPDIR=" + tmp.string());
    argv.insert(argv.end(), vars.begin(), vars.end());
    argv.push_back(HVACTOR_RUN);
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, root.path() / "run", timeout);
  }
};

} // namespace

TEST_SUITE("hvactor-run in a Slurm allocation") {

TEST_CASE("a job id that climbs out of $HOME/.hvactor is refused before anything is made: the "
          "directory it names survives") {
  auto bind = non_loopback_address();
  if (bind.empty()) {
    MESSAGE("skipped: this machine has no non-loopback IPv4 address to --bind");
    return;
  }
  sandbox s;
  auto before = entries(s.home);
  auto r = s.run({"SLURM_JOB_ID=1/../../victim", "SLURM_JOB_NODELIST=n1"},
                 {"--bind", bind, "--timeout", "10", "--", "/bin/true"});
  INFO("stderr:\n" << r.err);
  CHECK(r.status.code == 2);
  CHECK(r.err.find("SLURM_JOB_ID='1/../../victim' is not a Slurm job id") != std::string::npos);
  CHECK(fs::exists(s.home / "victim" / "data" / "precious"));
  CHECK(entries(s.home) == before);
  CHECK(fs::is_empty(s.tmp));
}

TEST_CASE("a Slurm-mode start that fails at srun names it and leaves nothing in HOME or TMPDIR") {
  auto bind = non_loopback_address();
  if (bind.empty()) {
    MESSAGE("skipped: this machine has no non-loopback IPv4 address to --bind");
    return;
  }
  sandbox s;
  auto before = entries(s.home);
  // A job id of this test's own, to look for what older versions left in /tmp.
  auto job = std::to_string(900000000 + ::getpid());
  auto r = s.run({"SLURM_JOB_ID=" + job, "SLURM_JOB_NODELIST=n[1-2]"},
                 {"--bind", bind, "--timeout", "20", "--", "/bin/true"});
  INFO("stderr:\n" << r.err);
  CHECK(r.status.code == 1);
  CHECK(r.err.find("never joined the head") != std::string::npos);
  CHECK(r.err.find("stand-in srun of the test") != std::string::npos);
  // It did get as far as the per-job TLS directory (off loopback) and the
  // head: both are gone, and nothing else was touched.
  CHECK(r.err.find("head on " + bind) != std::string::npos);
  CHECK(entries(s.home) == before);
  CHECK(fs::exists(s.home / "victim" / "data" / "precious"));
  CHECK(entries(s.tmp).empty());
  CHECK_FALSE(fs::exists("/tmp/hvactor-" + std::to_string(::getuid()) + "/slurm-" + job));
}

TEST_CASE("array and heterogeneous job ids (N_M, N+M) start the head and reach srun") {
  sandbox s;
  for (const char* job : {"42_7", "42+1"}) {
    CAPTURE(job);
    auto r = s.run({std::string{"SLURM_JOB_ID="} + job, "SLURM_JOB_NODELIST=n1"},
                   {"--timeout", "20", "--", "/bin/true"});
    INFO("stderr:\n" << r.err);
    CHECK(r.status.code == 1);
    CHECK(r.err.find("stand-in srun of the test") != std::string::npos);
    CHECK(entries(s.tmp).empty());
  }
}

TEST_CASE("SLURM_JOB_ID without a node list is refused naming SLURM_JOB_NODELIST, not run "
          "locally") {
  sandbox s;
  auto r = s.run({"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST="}, {"--", "/bin/true"}, 20s);
  INFO("stderr:\n" << r.err);
  CHECK(r.status.code == 2);
  CHECK(r.err.find("SLURM_JOB_NODELIST is empty") != std::string::npos);
  CHECK(r.err.find("unset SLURM_JOB_ID") != std::string::npos);
  auto local = s.run({"SLURM_JOB_ID=42"}, {"--launcher", "local", "-np", "1", "--", "/bin/true"},
                     60s);
  INFO("stderr:\n" << local.err);
  CHECK(local.status.code == 0);
}

TEST_CASE("20000 node names that do not resolve: the head's address is chosen in seconds, and "
          "the messages stay short") {
  sandbox s;
  auto r = s.run({"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=zz-nonexistent-[1-20000]"},
                 {"--timeout", "20", "--", "/bin/true"}, 60s);
  INFO("stderr (first 2000 bytes):\n" << r.err.substr(0, 2000));
  CHECK(r.status.code == 1);
  CHECK(r.elapsed < 10s);
  // Either this host's name gives the head an address and the stand-in srun
  // fails, or it does not and the message says to pass --bind.
  bool srun_failed = r.err.find("do not resolve here; the address of this host's name")
                       != std::string::npos
                     && r.err.find("stand-in srun of the test") != std::string::npos;
  bool no_address = r.err.find("pass --bind ADDRESS") != std::string::npos;
  CHECK((srun_failed || no_address));
  CHECK(r.err.find("(19992 more)") != std::string::npos);
  CHECK(r.err.size() < 8000);
  CHECK(entries(s.tmp).empty());
}

} // TEST_SUITE
