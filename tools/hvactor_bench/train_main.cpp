// hvactor-bench-train: `hvactor-bench train`, which hvactor-bench runs
// through exec (this program links LibTorch; hvactor-bench does not).

#include <string>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <hvactor/hvactor.hpp>

#include "train.hpp"

int main(int argc, char** argv) {
  try {
    // In a worker process this never returns. 64 CPU slots, as hvactor-bench.
    hvactor::runtime rt{argc, argv, {.num_cpus = 64}};
    auto args = rt.args();
    if (args.size() < 2 || args[1] != "train") {
      fmt::print(stderr, "hvactor-bench-train: run it as `hvactor-bench train ...`\n");
      return 2;
    }
    return hvactor::bench_tool::run_train(rt, args);
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "hvactor-bench: {} (see hvactor-bench train --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 1;
  }
}
