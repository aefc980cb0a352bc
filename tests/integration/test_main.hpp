#pragma once

#include <hvactor/runtime.hpp>

/// The runtime every test of the binary shares (an embedded cluster with 8
/// CPUs, so that 4-worker jobs fit on a 2-core machine).
hvactor::runtime& test_runtime();
