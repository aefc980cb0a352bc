#pragma once

// hvd::join() workloads, run inside a worker, as Horovod's
// test_horovod_join_allreduce, _allgather and _broadcast check join: ranks
// with uneven numbers of steps, a rank that joins at once while the others
// average, and other kinds of collectives while a rank has joined. Each
// returns join()'s result on this rank, then what differs (nothing when
// right). The *_ops bodies run in an initialized hvd session; the plain
// names open and close one. Used on the shared-memory and Gloo paths
// (join_test.cpp) and the hierarchical one (hier_driver.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <hvactor/errors.hpp>
#include <hvactor/hvd.hpp>

#include "hvd_session.hpp"

namespace hvactor::test {

namespace join_detail {

/// Equal within float rounding (relative 1e-5, absolute below 1).
inline bool close(float got, double want) {
  return std::fabs(got - want) <= 1e-5 * std::max(1.0, std::fabs(want));
}

} // namespace join_detail

/// Horovod's test_horovod_join_allreduce in an initialized session: rank
/// `first` joins at once; the others average two named tensors (fused),
/// equal on every rank, then join. Returns join()'s result, then what
/// differs.
inline std::string join_allreduce_ops(int first) {
  using join_detail::close;
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

/// join_allreduce_ops in a session of its own.
inline std::string join_allreduce(int first) {
  hvd_session s;
  return join_allreduce_ops(first);
}

/// In an initialized session, rank r runs base + r steps of: a named async
/// average of a gradient and an unnamed synchronous sum of counters; then
/// joins; then, after the join, an unnamed sum and a named async sum on
/// every rank. Returns join()'s result, then what differs.
inline std::string uneven_steps_ops(int base) {
  using join_detail::close;
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

/// uneven_steps_ops in a session of its own.
inline std::string uneven_steps(int base) {
  hvd_session s;
  return uneven_steps_ops(base);
}

/// In an initialized session, rank `joiner` joins at once; the others run
/// `what` ("allgather", "broadcast" from the joiner, "barrier"), then join.
/// Returns the error's text ("" when none) and join()'s result after a '|'.
inline std::string other_kind_while_joined_ops(int joiner, const std::string& what) {
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
    } catch (const collective_error& e) {
      error = e.what();
    }
  }
  int ret = hvd::join();
  return error + "|" + std::to_string(ret);
}

/// other_kind_while_joined_ops in a session of its own.
inline std::string other_kind_while_joined(int joiner, std::string what) {
  hvd_session s;
  return other_kind_while_joined_ops(joiner, what);
}

} // namespace hvactor::test
