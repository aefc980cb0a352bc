#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_main.hpp"

namespace {
hvactor::runtime* the_runtime = nullptr;
}

hvactor::runtime& test_runtime() {
  return *the_runtime;
}

int main(int argc, char** argv) {
  // In a worker process this never returns: workers run this same binary.
  hvactor::runtime rt{argc, argv, {.num_cpus = 8, .node_id = "test-node"}};
  the_runtime = &rt;
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
