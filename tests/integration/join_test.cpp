// hvd::join() between real worker processes (2, 3 and 4 ranks, over shared
// memory and over Gloo), as Horovod's test_horovod_join_allreduce,
// _allgather and _broadcast check it: ranks with uneven numbers of steps
// finish without hanging, the joined ranks take part with zeros (an
// average still divides by the full size), an allgather or a broadcast
// while a rank has joined fails on the others, join() returns the last rank
// to join on every rank, and a rank that dies while the others wait in
// join() fails them.

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "child_process.hpp"
#include "hvd_session.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool close(float got, double want) {
  return std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want));
}

/// Horovod's test_horovod_join_allreduce: rank `first` joins at once; the
/// others average two named tensors (fused), equal on every rank, then
/// join. Returns join()'s result, then what differs (nothing when right).
std::string join_allreduce(int first) {
  hvactor::test::hvd_session s;
  int rank = hvd::rank(), size = hvd::size();
  std::vector<float> a(125), b(17 * 17);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(static_cast<int>(i * 37 % 200) - 100);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(static_cast<int>(i * 11 % 150) - 75);
  auto a0 = a, b0 = b;
  std::string problems;
  int ret = -1;
  if (rank == first) {
    ret = hvd::join();
  } else {
    auto ha = hvd::allreduce_async(std::span<float>(a), hvd::op::average, "tensor_a");
    auto hb = hvd::allreduce_async(std::span<float>(b), hvd::op::average, "tensor_b");
    hvd::synchronize(ha);
    hvd::synchronize(hb);
    ret = hvd::join();
    // Horovod's expectation: tensor * (size - 1) / size.
    for (size_t i = 0; i < a.size(); ++i)
      if (!close(a[i], a0[i] * (size - 1.0) / size))
        problems = " tensor_a[" + std::to_string(i) + "] = " + std::to_string(a[i]);
    for (size_t i = 0; i < b.size(); ++i)
      if (!close(b[i], b0[i] * (size - 1.0) / size))
        problems = " tensor_b[" + std::to_string(i) + "] = " + std::to_string(b[i]);
  }
  return std::to_string(ret) + problems;
}

/// Rank r runs base + r steps of: a named async average of a gradient and
/// an unnamed synchronous sum of counters; then joins; then, after the
/// join, an unnamed sum and a named async sum on every rank. Returns
/// join()'s result, then what differs.
std::string uneven_steps(int base) {
  hvactor::test::hvd_session s;
  int rank = hvd::rank(), size = hvd::size();
  int steps = base + rank;
  std::ostringstream problems;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> grad(1000);
    for (size_t i = 0; i < grad.size(); ++i)
      grad[i] = static_cast<float>((rank + 1) * (step + 1) + static_cast<int>(i % 7));
    auto h = hvd::allreduce_async(std::span<float>(grad), hvd::op::average, "grad");
    std::vector<int64_t> counter{1, step, rank};
    hvd::allreduce(std::span<int64_t>(counter), hvd::op::sum);
    hvd::synchronize(h);
    // The ranks that still have this step; the others add zeros.
    int64_t present = 0, ranks = 0, values = 0;
    for (int q = 0; q < size; ++q)
      if (base + q > step) {
        ++present;
        ranks += q;
        values += (q + 1) * (step + 1);
      }
    if (counter != std::vector<int64_t>{present, step * present, ranks})
      problems << " counter at step " << step << " = " << counter[0] << "," << counter[1] << ","
               << counter[2];
    for (size_t i = 0; i < grad.size(); ++i)
      if (!close(grad[i], (values + present * static_cast<int64_t>(i % 7)) / double(size))) {
        problems << " grad[" << i << "] at step " << step << " = " << grad[i];
        break;
      }
  }
  int ret = hvd::join();
  // Afterwards the ranks pair again, unnamed calls included.
  std::vector<int64_t> x{rank};
  hvd::allreduce(std::span<int64_t>(x), hvd::op::sum);
  if (x[0] != size * (size - 1) / 2)
    problems << " sum after join = " << x[0];
  std::vector<double> y(5, 1.0);
  auto h = hvd::allreduce_async(std::span<double>(y), hvd::op::sum, "after");
  hvd::synchronize(h);
  if (y[0] != size)
    problems << " named sum after join = " << y[0];
  return std::to_string(ret) + problems.str();
}

/// Rank `joiner` joins at once; the others run `what` ("allgather",
/// "broadcast" from the joiner, "barrier"), then join. Returns the error's
/// text ("" when none) and join()'s result after a '|'.
std::string other_kind_while_joined(int joiner, std::string what) {
  hvactor::test::hvd_session s;
  std::string error;
  if (hvd::rank() != joiner) {
    try {
      std::vector<float> x(17, static_cast<float>(hvd::rank()));
      if (what == "allgather")
        hvd::allgather(std::span<const float>(x));
      else if (what == "broadcast")
        hvd::broadcast(std::span<float>(x), joiner);
      else
        hvd::barrier();
    } catch (const hvactor::collective_error& e) {
      error = e.what();
    }
  }
  int ret = hvd::join();
  return error + "|" + std::to_string(ret);
}

/// Rank 1 SIGKILLs itself 300 ms in; the others wait in join(). Each
/// survivor writes to <dir>/rank-<r> how long join() took after the kill
/// (ms) and its error.
std::string join_then_peer_dies(std::string dir) {
  hvactor::test::hvd_session s;
  if (hvd::rank() == 1) {
    std::this_thread::sleep_for(300ms);
    ::raise(SIGKILL);
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string outcome = "no error";
  try {
    hvd::join();
  } catch (const hvactor::error& e) {
    outcome = e.what();
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - t0 - 300ms)
              .count();
  std::ofstream(std::filesystem::path(dir) / ("rank-" + std::to_string(hvd::rank())))
    << ms << "\n"
    << outcome;
  return outcome;
}

hvactor::executor make(int n, const char* shm, std::chrono::milliseconds timeout = 20s) {
  return hvactor::executor{test_runtime(), hvactor::executor::create_settings({.timeout = timeout}),
                           {.num_workers = n, .extra_env_vars = {{"HVACTOR_SHM", shm}}}};
}

} // namespace

TEST_SUITE("hvd::join") {

TEST_CASE("Horovod's join allreduce: the joined rank adds zeros, the average divides by the "
          "full size, and join() returns the same rank, not the first to join, everywhere") {
  for (const char* shm : {"1", "0"})
    for (int n : {2, 3}) {
      CAPTURE(shm);
      CAPTURE(n);
      auto ex = make(n, shm);
      ex.start();
      for (int first : {0, 1}) {
        CAPTURE(first);
        auto got = ex.run(&join_allreduce, first);
        for (auto& g : got) {
          CAPTURE(g);
          CHECK(g == got[0]);
          CHECK(g != std::to_string(first));
          CHECK(g.find(' ') == std::string::npos); // no problems listed
        }
      }
      ex.shutdown();
    }
}

TEST_CASE("ranks with 10, 11, 12 and 13 steps finish without hanging, with Horovod's results, "
          "join() returns the last rank to join, and the ranks pair again afterwards") {
  struct variant {
    const char* shm;
    int n;
  };
  for (auto v : {variant{"1", 4}, variant{"0", 4}, variant{"1", 2}, variant{"0", 3}}) {
    CAPTURE(v.shm);
    CAPTURE(v.n);
    auto ex = make(v.n, v.shm);
    ex.start();
    auto t0 = std::chrono::steady_clock::now();
    auto got = ex.run(&uneven_steps, 10);
    CHECK(std::chrono::steady_clock::now() - t0 < 30s);
    for (auto& g : got)
      CHECK(g == std::to_string(v.n - 1));
    ex.shutdown();
  }
}

TEST_CASE("while a rank has joined, an allgather and a broadcast from the joined root fail on the "
          "others with Horovod's message; a barrier runs; the join still ends") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    auto ex = make(3, shm);
    ex.start();
    auto gathered = ex.run(&other_kind_while_joined, 0, std::string{"allgather"});
    for (size_t r = 1; r < gathered.size(); ++r) {
      CAPTURE(gathered[r]);
      CHECK(contains(gathered[r], "Allgather is not supported with Join at this time"));
      CHECK(contains(gathered[r], "rank 0 called hvd::join()"));
      CHECK(contains(gathered[r], "failed on rank " + std::to_string(r)));
    }
    auto broadcast = ex.run(&other_kind_while_joined, 1, std::string{"broadcast"});
    for (size_t r : {size_t{0}, size_t{2}}) {
      CAPTURE(broadcast[r]);
      CHECK(contains(broadcast[r], "Broadcast is not supported with Join at this time"));
      CHECK(contains(broadcast[r], "root 1"));
    }
    CHECK(broadcast[1] == broadcast[0].substr(broadcast[0].find('|')));
    auto barrier = ex.run(&other_kind_while_joined, 2, std::string{"barrier"});
    CHECK(barrier == std::vector<std::string>(3, "|1"));
    ex.shutdown();
  }
}

TEST_CASE("a rank SIGKILLed while the others wait in join() fails them within 2 s") {
  for (const char* shm : {"1", "0"}) {
    CAPTURE(shm);
    hvactor::test::temp_dir dir;
    auto ex = make(3, shm, 5s);
    ex.start();
    CHECK_THROWS_AS(ex.run(&join_then_peer_dies, dir.path().string()), hvactor::worker_error);
    for (int r : {0, 2}) {
      CAPTURE(r);
      auto report = dir.path() / ("rank-" + std::to_string(r));
      hvactor::test::wait_until([&] { return std::filesystem::exists(report); }, 15s);
      std::ifstream in(report);
      long ms = -1;
      std::string text;
      in >> ms;
      std::getline(in, text);
      std::getline(in, text);
      CAPTURE(text);
      CHECK(ms < 2000);
      CHECK(text != "no error");
    }
    ex.shutdown();
  }
}

} // TEST_SUITE
