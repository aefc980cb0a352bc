#include "hvactor/discovery.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "hvactor/errors.hpp"
#include "actors/placement/discovery_script.hpp"

using hvactor::discovery;
using hvactor::host_slots;
using hvactor::parse_host_slots;

namespace {

namespace fs = std::filesystem;

/// A temporary directory of executable shell scripts, removed at the end.
class script_dir {
public:
  script_dir() {
    std::string pattern = (fs::temp_directory_path() / "hvactor-discovery-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
  }
  ~script_dir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// Writes `body` after a "#!/bin/sh" line to `name`, executable.
  std::string add(const std::string& name, const std::string& body, bool executable = true) {
    auto path = (dir_ / name).string();
    std::ofstream{path} << "#!/bin/sh\n" << body << "\n";
    ::chmod(path.c_str(), executable ? 0755 : 0644);
    return path;
  }

private:
  fs::path dir_;
};

/// The message `f` throws as hvactor::error, or "" when it does not.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const hvactor::error& e) {
    return e.what();
  }
  return "";
}

/// The message parse_host_slots throws for `text`, or "".
std::string parse_error(const std::string& text) {
  try {
    parse_host_slots(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& entry : fs::directory_iterator{"/proc/self/fd"})
    ++n;
  return n;
}

using hosts = std::vector<host_slots>;

/// Whether process `pid` ended within 2 s (a zombie not yet reaped by its
/// new parent counts as ended).
bool gone_or_zombie(int pid) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
    std::string line;
    if (!std::getline(stat, line))
      return true;
    auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
    ::usleep(10000);
  }
  return false;
}

} // namespace

TEST_SUITE("discovery") {

TEST_CASE("parse_host_slots reads node-id:slots and bare node ids as one slot") {
  CHECK(parse_host_slots("") == hosts{});
  CHECK(parse_host_slots("node-a:2\nnode-b\nnode_c.1:16") == hosts{{"node-a", 2}, {"node-b", 1},
                                                                   {"node_c.1", 16}});
  CHECK(parse_host_slots("  a : 3 \r\nb\r\n") == hosts{{"a", 3}, {"b", 1}});
  CHECK(parse_host_slots("a:65535\n") == hosts{{"a", 65535}});
}

TEST_CASE("parse_host_slots skips comments and blank lines and drops hosts with 0 slots") {
  CHECK(parse_host_slots("# hosts\n\n   \na:1\n  # b:2\nc:0\nd:00\ne:2\n")
        == hosts{{"a", 1}, {"e", 2}});
}

TEST_CASE("parse_host_slots names the line number and text of a malformed line") {
  auto bad_slots = parse_error("a:1\nb:x\n");
  CHECK(bad_slots.find("line 2") != std::string::npos);
  CHECK(bad_slots.find("'b:x'") != std::string::npos);
  CHECK(bad_slots.find("0..65535") != std::string::npos);
  for (const char* text : {"a:-1", "a:65536", "a:", "a:1.5", "a:1:2", "a:+1", "a: 1 2"})
    CHECK_MESSAGE(parse_error(text).find("line 1") != std::string::npos, text);
  auto twice = parse_error("a:1\n# c\nb:2\na:3\n");
  CHECK(twice.find("line 4") != std::string::npos);
  CHECK(twice.find("listed twice") != std::string::npos);
  CHECK(parse_error("a:0\na:2").find("line 2") != std::string::npos);
  auto bad_id = parse_error("good:1\n\nbad/id:2\n");
  CHECK(bad_id.find("line 3") != std::string::npos);
  CHECK(bad_id.find("node id") != std::string::npos);
  CHECK(parse_error("-a:1").find("line 1") != std::string::npos);
  CHECK(parse_error(":2").find("line 1") != std::string::npos);
  CHECK(parse_error("a b:2").find("line 1") != std::string::npos);
}

TEST_CASE("a discovery script's stdout lists the hosts") {
  script_dir dir;
  auto path = dir.add("discover.sh", "echo '# two hosts'\necho node-a:2\necho\necho node-b\n"
                                     "echo node-c:0\necho noise >&2");
  auto d = discovery::script(path);
  CHECK_FALSE(d.from_cluster());
  CHECK(d.describe() == "script " + path);
  auto before = open_fds();
  CHECK(d.find() == hosts{{"node-a", 2}, {"node-b", 1}});
  CHECK(d.find() == hosts{{"node-a", 2}, {"node-b", 1}});
  CHECK(open_fds() == before);
}

TEST_CASE("a discovery script that fails names the script, the reason and its stderr") {
  script_dir dir;
  auto before = open_fds();
  auto exit3 = dir.add("exit3.sh", "echo a:1\necho 'no cluster here' >&2\nexit 3");
  auto msg = error_of([&] { discovery::script(exit3).find(); });
  CHECK(msg.find(exit3) != std::string::npos);
  CHECK(msg.find("exit code 3") != std::string::npos);
  CHECK(msg.find("no cluster here") != std::string::npos);

  auto killed = dir.add("killed.sh", "kill -9 $$");
  CHECK(error_of([&] { discovery::script(killed).find(); }).find("signal 9")
        != std::string::npos);

  auto malformed = dir.add("malformed.sh", "echo a:1\necho 'b:many'");
  msg = error_of([&] { discovery::script(malformed).find(); });
  CHECK(msg.find(malformed) != std::string::npos);
  CHECK(msg.find("line 2") != std::string::npos);

  auto noisy = dir.add("noisy.sh", "head -c 1100000 /dev/zero | tr '\\0' a");
  CHECK(error_of([&] { discovery::script(noisy).find(); }).find("more than")
        != std::string::npos);

  auto not_executable = dir.add("plain.sh", "echo a:1", false);
  CHECK(error_of([&] { discovery::script(not_executable).find(); }).find(not_executable)
        != std::string::npos);
  CHECK_FALSE(error_of([&] { discovery::script(dir.add("x", "") + ".missing").find(); })
                .empty());
  CHECK(open_fds() == before);
}

TEST_CASE("a discovery script that runs past its limit is killed with its children") {
  script_dir dir;
  auto pid_file = dir.add("child.pid", "");
  auto slow = dir.add("slow.sh", "echo a:1\nsleep 30 &\necho $! > " + pid_file + "\nwait");
  auto before = open_fds();
  auto start = std::chrono::steady_clock::now();
  auto msg = error_of([&] { hvactor::run_discovery_script(slow, std::chrono::milliseconds(300)); });
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(msg.find(slow) != std::string::npos);
  CHECK(msg.find("did not finish within 300 ms") != std::string::npos);
  CHECK(took < std::chrono::seconds(5));
  CHECK(open_fds() == before);
  // The script's own child (same process group) was killed too.
  std::string child;
  std::ifstream{pid_file} >> child;
  REQUIRE_FALSE(child.empty());
  CHECK(gone_or_zombie(std::stoi(child)));
  // Within its limit the same runner answers.
  auto quick = dir.add("quick.sh", "echo a:1");
  CHECK(hvactor::run_discovery_script(quick, std::chrono::seconds(5)) == hosts{{"a", 1}});
}

TEST_CASE("a discovery function's hosts are checked like a script's") {
  auto d = discovery::function([] { return hosts{{"a", 2}, {"b", 0}, {"c", 1}}; });
  CHECK(d.describe() == "a function");
  CHECK_FALSE(d.from_cluster());
  CHECK(d.find() == hosts{{"a", 2}, {"c", 1}});
  CHECK(error_of([] { discovery::function([] { return hosts{{"a", 1}, {"a", 2}}; }).find(); })
          .find("twice")
        != std::string::npos);
  CHECK(error_of([] { discovery::function([] { return hosts{{"a/b", 1}}; }).find(); })
          .find("node id")
        != std::string::npos);
  CHECK(error_of([] { discovery::function([] { return hosts{{"a", -1}}; }).find(); })
          .find("0..65535")
        != std::string::npos);
}

TEST_CASE("an exception from a discovery function reaches the caller unchanged") {
  struct custom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  int calls = 0;
  auto d = discovery::function([&]() -> hosts {
    if (++calls == 2)
      throw custom("scheduler unreachable");
    return {{"a", 1}};
  });
  CHECK(d.find() == hosts{{"a", 1}});
  CHECK_THROWS_WITH_AS(d.find(), "scheduler unreachable", custom);
  CHECK(d.find() == hosts{{"a", 1}});
  CHECK_THROWS_AS(discovery::function({}), std::invalid_argument);
}

TEST_CASE("the default discovery is the cluster's and cannot be polled itself") {
  discovery d;
  CHECK(d.from_cluster());
  CHECK(d.describe() == "the cluster's live nodes");
  CHECK_THROWS_AS(d.find(), hvactor::error);
}

} // TEST_SUITE
