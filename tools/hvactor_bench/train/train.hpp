#pragma once

// hvactor-bench train: Horovod's synthetic benchmark
// (pytorch_synthetic_benchmark.py) in C++: data-parallel training of
// ResNet-50 or an MLP on random data through hvd::distributed_optimizer,
// images/s per worker and in total with a 95 % interval, and with
// --scaling the efficiency of each world size against the smallest.

#include <string>
#include <vector>

#include <hvactor/runtime.hpp>

namespace hvactor::bench_tool {

/// args: the runtime's remaining arguments (args[1] is "train"). Throws
/// std::invalid_argument for bad options; returns 1 when --check found
/// ranks whose parameters differ.
int run_train(hvactor::runtime& rt, const std::vector<std::string>& args);

} // namespace hvactor::bench_tool
