// Shared-memory collectives between real worker processes on one node (the
// embedded cluster): the path each op takes, every op and dtype at 2, 3 and
// 4 ranks against a reference computed locally (odd sizes, 0 elements,
// sizes that take many chunks of the segment), Gloo's results, a rank
// SIGKILLed inside a shared-memory allreduce, and what a job leaves behind.
//
// Worker functions return what they found wrong as text ("" when all is
// well), so that the driver's CHECK shows it.

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "victim_allreduce.hpp"

#include "hvd_session.hpp"
#include "test_main.hpp"
#include "test_support.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

using session = hvactor::test::hvd_session;

// 64 KiB slots (the smallest): 1 MiB messages take many chunks.
constexpr const char* small_slots = "65536";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}


class problems {
public:
  void add(const std::string& what) {
    if (++count_ <= 8)
      text_ += what + "\n";
  }
  std::string report() const {
    return count_ <= 8 ? text_ : text_ + "... " + std::to_string(count_) + " problems\n";
  }

private:
  std::string text_;
  int count_ = 0;
};

// --- the reference: Gloo's pairwise arithmetic in rank order -----------------

template <class T>
T value_of(int rank, size_t i, hvd::op o) {
  // Small integers: exact in every type; products stay small.
  int64_t v = o == hvd::op::product ? 1 + static_cast<int64_t>((i + static_cast<size_t>(rank)) % 2)
                                    : static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 13) % 41) - 20;
  if constexpr (std::is_same_v<T, hvd::half>)
    return hvd::half(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T>
T combine(T a, T b, hvd::op o) {
  if constexpr (std::is_same_v<T, hvd::half>) {
    float x = static_cast<float>(a), y = static_cast<float>(b);
    switch (o) {
      case hvd::op::product:
        return hvd::half(x * y);
      case hvd::op::min:
        return hvd::half(std::min(x, y));
      case hvd::op::max:
        return hvd::half(std::max(x, y));
      default:
        return hvd::half(x + y);
    }
  } else {
    switch (o) {
      case hvd::op::product:
        return a * b;
      case hvd::op::min:
        return std::min(a, b);
      case hvd::op::max:
        return std::max(a, b);
      default:
        return a + b;
    }
  }
}

template <class T>
bool same_bits(T a, T b) {
  if constexpr (std::is_same_v<T, hvd::half>)
    return a.bits == b.bits;
  else
    return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, hvd::half>)
    return static_cast<float>(x);
  else
    return static_cast<double>(x);
}

template <class T>
void check_allreduce(problems& found, size_t count, hvd::op o) {
  int n = hvd::size(), me = hvd::rank();
  std::vector<T> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = value_of<T>(me, i, o);
  hvd::allreduce(std::span<T>(x), o);
  for (size_t i = 0; i < count; ++i) {
    T want = value_of<T>(0, i, o);
    for (int r = 1; r < n; ++r)
      want = combine(want, value_of<T>(r, i, o), o);
    if (!same_bits(x[i], want)) {
      std::ostringstream s;
      s << "allreduce " << hvd::to_string(hvd::dtype_of<T>()) << " " << hvd::to_string(o) << " x "
        << count << " [" << i << "] = " << as_double(x[i]) << ", want " << as_double(want);
      found.add(s.str());
      return;
    }
  }
}

// Sizes (elements): empty, tiny and odd, across the one-step limit (16 KiB),
// across one 64 KiB slot, and many chunks.
std::vector<size_t> sizes_for(size_t element_bytes) {
  return {0, 1, 3, 17, 1001, (16 << 10) / element_bytes + 1, (64 << 10) / element_bytes * 2 + 5,
          (1 << 20) / element_bytes + 3};
}

template <class T>
void check_type(problems& found) {
  for (auto o : {hvd::op::sum, hvd::op::min, hvd::op::max, hvd::op::product})
    for (auto count : sizes_for(sizeof(T)))
      check_allreduce<T>(found, count, o);
}

void check_allgather(problems& found) {
  int n = hvd::size(), me = hvd::rank();
  // Rank r contributes r * 40000 + 3 elements (rank 1's and up span
  // several slots); then everyone contributes nothing.
  for (size_t scale : {size_t{40000}, size_t{0}}) {
    auto count_of = [&](int r) { return scale == 0 ? 0 : static_cast<size_t>(r) * scale + 3; };
    std::vector<int32_t> mine(count_of(me));
    for (size_t i = 0; i < mine.size(); ++i)
      mine[i] = me * 1000003 + static_cast<int32_t>(i);
    auto all = hvd::allgather(std::span<const int32_t>(mine));
    size_t at = 0;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count_of(r); ++i, ++at)
        if (at >= all.size() || all[at] != r * 1000003 + static_cast<int32_t>(i)) {
          found.add("allgather: element " + std::to_string(at) + " (rank " + std::to_string(r)
                    + ", " + std::to_string(i) + ") is wrong");
          return;
        }
    if (at != all.size())
      found.add("allgather: " + std::to_string(all.size()) + " elements, want "
                + std::to_string(at));
  }
}

void check_broadcast(problems& found) {
  int n = hvd::size(), me = hvd::rank();
  for (int root = 0; root < n; ++root)
    for (size_t count : {size_t{1}, size_t{5000}, size_t{300001}}) {
      std::vector<double> x(count, me == root ? 0.0 : -1.0);
      if (me == root)
        for (size_t i = 0; i < count; ++i)
          x[i] = static_cast<double>(i) * 0.5 + root;
      hvd::broadcast(std::span<double>(x), root);
      for (size_t i = 0; i < count; ++i)
        if (x[i] != static_cast<double>(i) * 0.5 + root) {
          found.add("broadcast from " + std::to_string(root) + " x " + std::to_string(count)
                    + ": element " + std::to_string(i) + " is wrong");
          break;
        }
    }
}

/// Every op and dtype; "" when all is well.
std::string every_op_and_dtype() {
  session s;
  problems found;
  check_type<float>(found);
  check_type<double>(found);
  check_type<int32_t>(found);
  check_type<int64_t>(found);
  check_type<hvd::half>(found);
  check_allgather(found);
  check_broadcast(found);
  for (int i = 0; i < 50; ++i)
    hvd::barrier();
  // Fused async allreduces (the engine's negotiation and fusion buffer
  // both go through the same path).
  std::vector<std::vector<float>> grads(64);
  std::vector<hvd::handle> handles;
  for (size_t t = 0; t < grads.size(); ++t) {
    grads[t].assign(100 + t * 37, static_cast<float>(hvd::rank() + 1));
    handles.push_back(hvd::allreduce_async(std::span<float>(grads[t]), hvd::op::sum,
                                           "g" + std::to_string(t)));
  }
  for (auto& h : handles)
    hvd::synchronize(h);
  float want = static_cast<float>(hvd::size() * (hvd::size() + 1) / 2);
  for (auto& g : grads)
    if (std::any_of(g.begin(), g.end(), [&](float v) { return v != want; })) {
      found.add("fused async allreduce is wrong");
      break;
    }
  // A fused batch larger than a slot (default slots): many chunks whose
  // slices cross tensor boundaries.
  std::vector<std::vector<int64_t>> big(8);
  handles.clear();
  for (size_t t = 0; t < big.size(); ++t) {
    big[t].resize(50001 + t);
    for (size_t i = 0; i < big[t].size(); ++i)
      big[t][i] = static_cast<int64_t>((i + t * 7) % 1000) * (hvd::rank() + 1);
    handles.push_back(hvd::allreduce_async(std::span<int64_t>(big[t]), hvd::op::max,
                                           "big" + std::to_string(t)));
  }
  for (auto& h : handles)
    hvd::synchronize(h);
  for (size_t t = 0; t < big.size(); ++t)
    for (size_t i = 0; i < big[t].size(); ++i)
      if (big[t][i] != static_cast<int64_t>((i + t * 7) % 1000) * hvd::size()) {
        found.add("fused max of tensor " + std::to_string(t) + " is wrong at " + std::to_string(i));
        t = big.size();
        break;
      }
  return found.report();
}

std::string backend_info() {
  session s;
  return hvd::backend_info();
}

/// Pseudo-random float sums and int64 min/max: what the driver compares
/// between shared memory and Gloo.
std::vector<double> mixed_results() {
  session s;
  std::vector<float> f(300007);
  uint64_t state = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(hvd::rank() + 1);
  for (auto& v : f) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5);
  }
  hvd::allreduce(std::span<float>(f), hvd::op::average);
  std::vector<int64_t> lo(70001), hi(70001);
  for (size_t i = 0; i < lo.size(); ++i)
    lo[i] = hi[i] = static_cast<int64_t>((i * 2654435761ULL + static_cast<uint64_t>(hvd::rank()) * 97) % 1000003);
  hvd::allreduce(std::span<int64_t>(lo), hvd::op::min);
  hvd::allreduce(std::span<int64_t>(hi), hvd::op::max);
  std::vector<double> out(f.begin(), f.end());
  out.insert(out.end(), lo.begin(), lo.end());
  out.insert(out.end(), hi.begin(), hi.end());
  return out;
}


int segment_fd_mode() {
  return std::getenv("HVACTOR_SHM_FD") ? std::atoi(std::getenv("HVACTOR_SHM_FD")) : -1;
}

// --- Driver side ---------------------------------------------------------------

hvactor::settings job_settings(std::chrono::milliseconds timeout = 20s) {
  return hvactor::executor::create_settings({.timeout = timeout, .placement_timeout = 20s});
}

void check_clean(const std::vector<std::string>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(reports[r].empty(), reports[r]);
  }
}

/// The collectives segments this process (the embedded node) holds.
int segments_held() {
  int held = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && contains(target.string(), "memfd:hvactor-collectives"))
      ++held;
  }
  return held;
}

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    names.insert(e.path().filename().string());
  return names;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in{p};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

TEST_SUITE("shared-memory collectives") {

TEST_CASE("on one node every op but alltoall takes shared memory; HVACTOR_SHM=0 takes Gloo and "
          "says so") {
  {
    hvactor::executor ex{test_runtime(), job_settings(), {.num_workers = 2}};
    ex.start();
    for (auto& info : ex.run(&backend_info)) {
      CAPTURE(info);
      CHECK(contains(info, "allreduce: shm, allgather: shm, broadcast: shm, barrier: shm"));
      CHECK(contains(info, "alltoall: gloo"));
      CHECK(contains(info, "2 ranks"));
    }
    CHECK(ex.run(&segment_fd_mode) == std::vector<int>{4, 4});
    ex.shutdown();
  }
  hvactor::executor ex{test_runtime(), job_settings(),
                       {.num_workers = 2, .extra_env_vars = {{"HVACTOR_SHM", "0"}}}};
  ex.start();
  for (auto& info : ex.run(&backend_info)) {
    CAPTURE(info);
    CHECK(contains(info, "allreduce: gloo"));
    CHECK(contains(info, "HVACTOR_SHM=0"));
  }
  // The node made no segment for it either.
  CHECK(ex.run(&segment_fd_mode) == std::vector<int>{-1, -1});
  ex.shutdown();
}

TEST_CASE("every op and dtype at 2, 3 and 4 ranks equals a reference computed locally, with odd "
          "sizes, empty tensors and messages of many segment chunks") {
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), job_settings(60s),
                         {.num_workers = n,
                          .extra_env_vars = {{"HOROVOD_FUSION_THRESHOLD", small_slots}}}};
    ex.start();
    check_clean(ex.run(&every_op_and_dtype));
    ex.shutdown();
  }
  // The default slots too.
  hvactor::executor ex{test_runtime(), job_settings(60s), {.num_workers = 3}};
  ex.start();
  check_clean(ex.run(&every_op_and_dtype));
  ex.shutdown();
}

TEST_CASE("shared memory gives Gloo's integer min and max bit for bit and its float average "
          "within rounding") {
  std::map<std::string, std::vector<std::vector<double>>> runs;
  for (const char* shm : {"1", "0"}) {
    hvactor::executor ex{test_runtime(), job_settings(),
                         {.num_workers = 3, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
    ex.start();
    runs[shm] = ex.run(&mixed_results);
    ex.shutdown();
  }
  auto& fast = runs["1"];
  auto& flat = runs["0"];
  REQUIRE(fast.size() == 3);
  REQUIRE(flat.size() == 3);
  // Every rank has the same bits on either path.
  CHECK(fast[0] == fast[1]);
  CHECK(fast[0] == fast[2]);
  size_t floats = 300007;
  REQUIRE(fast[0].size() == flat[0].size());
  size_t off = 0;
  for (size_t i = 0; i < fast[0].size(); ++i) {
    if (i < floats) {
      if (std::abs(fast[0][i] - flat[0][i]) > 1e-6)
        ++off;
    } else if (fast[0][i] != flat[0][i]) {
      ++off;
    }
  }
  CHECK(off == 0);
}

TEST_CASE("a rank SIGKILLed inside a shared-memory allreduce fails every other rank with a "
          "collective_error naming it within 100 ms") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto dir = std::filesystem::temp_directory_path()
               / ("hvactor-shm-kill-" + std::to_string(::getpid()) + "-" + std::to_string(n));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    hvactor::executor ex{test_runtime(), job_settings(30s), {.num_workers = n}};
    ex.start();
    auto pids = ex.worker_pids();
    int victim = n - 1;
    try {
      ex.run(&hvactor::test::allreduce_until_killed, victim, dir.string());
    } catch (const hvactor::error&) {
      // The victim's death.
    }
    REQUIRE(hvactor::test::wait_until(
      [&] {
        for (int r = 0; r < n; ++r)
          if (r != victim && !std::filesystem::exists(dir / ("rank-" + std::to_string(r))))
            return false;
        return true;
      },
      10s));
    int64_t killed = std::stoll(read_file(dir / "killed"));
    for (int r = 0; r < n; ++r) {
      if (r == victim)
        continue;
      CAPTURE(r);
      std::istringstream in{read_file(dir / ("rank-" + std::to_string(r)))};
      std::string kind, what;
      int peer = -2;
      int64_t at = 0;
      in >> kind >> peer >> at;
      std::getline(in, what);
      CAPTURE(what);
      CHECK(kind == "collective_error");
      CHECK(peer == victim);
      CHECK(contains(what, "peer rank " + std::to_string(victim)));
      CHECK(contains(what, "failed on rank " + std::to_string(r)));
      CHECK(at - killed < 100'000'000);
    }
    ex.shutdown();
    CHECK(hvactor::test::all_gone(pids, 5s));
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("a job leaves no segment behind, in /dev/shm or held by the node, even after a "
          "SIGKILLed worker") {
  auto before = dev_shm();
  {
    hvactor::executor ex{test_runtime(), job_settings(), {.num_workers = 3}};
    ex.start();
    CHECK(segments_held() >= 1);
    check_clean(ex.run(&every_op_and_dtype));
    auto pids = ex.worker_pids();
    ::kill(pids[1], SIGKILL);
    ex.shutdown();
  }
  CHECK(hvactor::test::wait_until([] { return segments_held() == 0; }, 5s));
  CHECK(dev_shm() == before);
}

TEST_CASE("another local user cannot open a worker's segment") {
  if (::geteuid() != 0)
    return; // needs root to become another user
  hvactor::executor ex{test_runtime(), job_settings(), {.num_workers = 2}};
  ex.start();
  auto pids = ex.worker_pids();
  auto path = "/proc/" + std::to_string(pids[0]) + "/fd/4";
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0)
      ::_exit(2);
    int fd = ::open(path.c_str(), O_RDWR);
    ::_exit(fd >= 0 ? 1 : 0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ex.shutdown();
}

} // TEST_SUITE
