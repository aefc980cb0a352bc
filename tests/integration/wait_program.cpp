// The SPMD program wait_cpu_test launches under hvactor-run: ranks that wait
// on each other for S seconds while the test measures their CPU time.
//   wait_program allreduce S   rank 0 sleeps S s, then allreduces; the others
//                              wait in the allreduce meanwhile
//   wait_program join S        rank 0 sleeps S s, then joins; the others wait
//                              in hvd::join() meanwhile
//   wait_program stall S       a stall: rank 0 submits tensor "a", rank 1
//                              tensor "b", and each waits for its own in
//                              hvd::synchronize() (S s later another thread
//                              submits the other's); ranks 2 and up wait in
//                              hvd::join() meanwhile
//   wait_program set_stall S   the same on process set {0, 1}
// Every rank prints "pid P rank R" once it waits, and at the end
// "resolved rank R ms M": the milliseconds from the end of the wait to the
// completion of what waited.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;

namespace {

using clock_type = std::chrono::steady_clock;

void say_waiting() {
  std::printf("pid %d rank %d\n", static_cast<int>(::getpid()), hvd::rank());
  std::fflush(stdout);
}

long ms_since(clock_type::time_point t) {
  return static_cast<long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count());
}

// Ranks 0 and 1 submit different tensors and wait for theirs (a stall);
// `pause` later another thread submits the other's. Returns the time from
// then to the completion of both.
long stall(const hvd::process_set& ps, std::chrono::seconds pause) {
  int rank = hvd::rank();
  std::vector<float> a{1.0f}, b{2.0f};
  auto submit = [&](bool first) {
    hvd::process_set_scope scope{ps};
    bool mine_a = (rank == 0) == first;
    return mine_a ? hvd::allreduce_async(std::span<float>(a), hvd::op::sum, "a")
                  : hvd::allreduce_async(std::span<float>(b), hvd::op::sum, "b");
  };
  auto first = submit(true);
  say_waiting();
  hvd::handle second;
  auto resolved = clock_type::now();
  std::thread late{[&] {
    std::this_thread::sleep_for(pause);
    resolved = clock_type::now();
    second = submit(false);
  }};
  hvd::synchronize(first);
  late.join();
  hvd::synchronize(second);
  return ms_since(resolved);
}

long late_rank_zero(const std::string& mode, std::chrono::seconds pause) {
  std::vector<float> x{1.0f};
  say_waiting();
  if (hvd::rank() == 0)
    std::this_thread::sleep_for(pause);
  auto resolved = clock_type::now();
  if (mode == "join")
    hvd::join();
  else
    hvd::allreduce(std::span<float>(x), hvd::op::sum);
  return ms_since(resolved);
}

} // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  auto pause = std::chrono::seconds{argc > 2 ? std::atoi(argv[2]) : 5};
  if (mode != "allreduce" && mode != "join" && mode != "stall" && mode != "set_stall") {
    std::fprintf(stderr, "usage: wait_program allreduce|join|stall|set_stall SECONDS\n");
    return 2;
  }
  hvd::process_set pair({0, 1});
  hvd::init({&pair});
  long ms = 0;
  if (mode == "allreduce" || mode == "join") {
    ms = late_rank_zero(mode, pause);
  } else if (hvd::rank() < 2) {
    ms = stall(mode == "stall" ? hvd::global_process_set() : pair, pause);
    hvd::join();
  } else {
    say_waiting();
    hvd::join();
  }
  std::printf("resolved rank %d ms %ld\n", hvd::rank(), ms);
  std::fflush(stdout);
  hvd::shutdown();
  return 0;
}
