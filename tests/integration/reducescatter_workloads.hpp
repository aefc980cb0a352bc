#pragma once

// The hierarchical reducescatter in a worker (issue 59; hier_driver's
// "reducescatter" mode): even and uneven parts, sum and average, int64 and
// float32, against the sums worked out here; and how many bytes this
// process wrote to its sockets (/proc/self/io's wchar: Gloo's TCP writes
// with writev, shared memory writes nothing) during a 16 MiB reducescatter
// and an allreduce of the same buffer, against what this rank's column
// sends to the other nodes.

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <hvactor/hvd.hpp>

#include "hvd_session.hpp"

namespace hvactor::test::rs {

/// Bytes this process wrote so far (write, writev: sockets and files).
inline int64_t written() {
  std::ifstream in{"/proc/self/io"};
  std::string key;
  int64_t value = 0;
  while (in >> key >> value)
    if (key == "wchar:")
      return value;
  return -1;
}

/// Rank r's element i (small integers: float sums are exact).
inline int64_t input(int r, size_t i) {
  return static_cast<int64_t>((i * 7 + static_cast<size_t>(r) * 13) % 101) - 50;
}

template <class T>
void check(std::string& problems, const std::string& what, size_t count, size_t row,
           hvd::op o) {
  int n = hvd::size(), me = hvd::rank();
  std::vector<T> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = static_cast<T>(input(me, i));
  auto counts = hvd::detail::reducescatter_counts(count, row, n);
  size_t begin = 0;
  for (int r = 0; r < me; ++r)
    begin += counts[static_cast<size_t>(r)];
  std::vector<T> got(counts[static_cast<size_t>(me)]);
  hvd::detail::reducescatter(x.data(), count, row, got.data(), hvd::dtype_of<T>(), o, {}, {});
  for (size_t j = 0; j < got.size(); ++j) {
    int64_t sum = 0;
    for (int r = 0; r < n; ++r)
      sum += input(r, begin + j);
    double want = o == hvd::op::sum ? static_cast<double>(sum)
                  : std::is_integral_v<T> ? static_cast<double>(sum / n) // truncates, as hvd
                                          : static_cast<double>(sum) / n;
    if (std::abs(static_cast<double>(got[j]) - want) > 1e-5 * (1 + std::abs(want))) {
      std::ostringstream s;
      s << what << ": element " << begin + j << " is " << static_cast<double>(got[j])
        << ", expected " << want << "; ";
      problems += s.str();
      return;
    }
  }
}

/// "<info>|<problems or OK>|<reducescatter bytes> <its column's bytes to
/// other nodes> <allreduce bytes>" of this rank.
inline std::string hierarchical_reducescatter() {
  hvd_session s;
  int n = hvd::size(), me = hvd::rank();
  std::string problems;
  for (auto o : {hvd::op::sum, hvd::op::average}) {
    auto name = std::string{hvd::to_string(o)};
    check<int64_t>(problems, "int64 even " + name, static_cast<size_t>(n) * 1000, 1, o);
    check<int64_t>(problems, "int64 uneven " + name, static_cast<size_t>(n) * 1000 + 3, 1, o);
    check<float>(problems, "float32 uneven rows " + name, (static_cast<size_t>(n) * 3 + 2) * 5, 5,
                 o);
    check<float>(problems, "float32 uneven, 1.3 M " + name, 1300003, 1, o);
    check<float>(problems, "float32 fewer elements than ranks " + name,
                 static_cast<size_t>(n) - 1, 1, o);
  }
  // Which rank is (cross rank c, local rank l), to know this rank's column.
  std::vector<int64_t> place{hvd::cross_rank(), hvd::local_rank()};
  auto places = hvd::allgather(std::span<const int64_t>(place));
  const size_t count = (size_t{1} << 22) + 3; // 16 MiB of float32, uneven
  auto counts = hvd::detail::reducescatter_counts(count, 1, n);
  int64_t column = 0;
  for (int r = 0; r < n; ++r)
    if (places[2 * static_cast<size_t>(r) + 1] == hvd::local_rank() && r != me)
      column += static_cast<int64_t>(counts[static_cast<size_t>(r)] * sizeof(float));
  std::vector<float> x(count, 1.0f);
  hvd::barrier();
  auto before = written();
  auto part = hvd::reducescatter(std::span<const float>(x), hvd::op::sum);
  auto rs_bytes = written() - before;
  if (part.empty() || part.front() != static_cast<float>(n) || part.back() != static_cast<float>(n))
    problems += "16 MiB reducescatter: not the sum; ";
  hvd::barrier();
  before = written();
  hvd::allreduce(std::span<float>(x), hvd::op::sum);
  auto ar_bytes = written() - before;
  return hvd::backend_info() + "|" + (problems.empty() ? "OK" : problems) + "|" +
         std::to_string(rs_bytes) + " " + std::to_string(column) + " " + std::to_string(ar_bytes);
}

} // namespace hvactor::test::rs
