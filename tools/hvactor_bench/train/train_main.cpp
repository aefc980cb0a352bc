// hvactor-bench-train: `hvactor-bench train`, which hvactor-bench runs
// through exec (this program links LibTorch; hvactor-bench does not).

#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "tools/hvactor_bench/layout.hpp"
#include "tools/hvactor_bench/train/train.hpp"

int main(int argc, char** argv) {
  return hvactor::bench_tool::exit_code_of([&] {
    // In a worker process this never returns. 64 CPU slots, as hvactor-bench.
    hvactor::runtime rt{argc, argv, {.num_cpus = 64}};
    auto args = rt.args();
    if (args.size() < 2 || args[1] != "train")
      throw std::invalid_argument("hvactor-bench-train: run it as `hvactor-bench train ...`");
    return hvactor::bench_tool::run_train(rt, args);
  });
}
