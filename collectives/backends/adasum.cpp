#include "collectives/backends/adasum.hpp"

#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace hvactor::collectives {

namespace {

template <class T>
double as_double(T x) {
  if constexpr (std::is_same_v<T, hvd::half>)
    return static_cast<float>(x);
  else
    return static_cast<double>(x);
}

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, hvd::half>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

struct dots {
  double ab = 0, aa = 0, bb = 0;
};

template <class T>
dots dot_and_norms(const void* a, const void* b, size_t n) {
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  dots d;
  for (size_t i = 0; i < n; ++i) {
    double u = as_double(x[i]), v = as_double(y[i]);
    d.ab += u * v;
    d.aa += u * u;
    d.bb += v * v;
  }
  return d;
}

template <class T>
void scaled_add(void* a, double ca, const void* b, double cb, size_t n) {
  auto* x = static_cast<T*>(a);
  auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i)
    x[i] = from_double<T>(ca * as_double(x[i]) + cb * as_double(y[i]));
}

dots measure(hvd::dtype t, const void* a, const void* b, size_t n) {
  switch (t) {
    case hvd::dtype::float16:
      return dot_and_norms<hvd::half>(a, b, n);
    case hvd::dtype::float32:
      return dot_and_norms<float>(a, b, n);
    default:
      return dot_and_norms<double>(a, b, n);
  }
}

void combine(hvd::dtype t, void* a, double ca, const void* b, double cb, size_t n) {
  switch (t) {
    case hvd::dtype::float16:
      return scaled_add<hvd::half>(a, ca, b, cb, n);
    case hvd::dtype::float32:
      return scaled_add<float>(a, ca, b, cb, n);
    default:
      return scaled_add<double>(a, ca, b, cb, n);
  }
}

// Sends `send_bytes` to `peer` and receives `recv_bytes` from it, through
// the backend's alltoallv (nothing to or from the other ranks).
void exchange(backend& b, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
              int peer, int ranks) {
  std::vector<int64_t> sends(static_cast<size_t>(ranks), 0), recvs(sends.size(), 0);
  sends[static_cast<size_t>(peer)] = static_cast<int64_t>(send_bytes);
  recvs[static_cast<size_t>(peer)] = static_cast<int64_t>(recv_bytes);
  b.alltoallv(send, sends, recv, recvs, hvd::dtype::uint8);
}

} // namespace

void check_adasum(hvd::dtype t, int ranks, const char* call) {
  if (t != hvd::dtype::float16 && t != hvd::dtype::float32 && t != hvd::dtype::float64)
    throw std::invalid_argument(fmt::format(
      "hvd::{}: op::adasum supports float16, float32 and float64 tensors (got {})", call,
      hvd::to_string(t)));
  if (ranks < 1 || (ranks & (ranks - 1)) != 0)
    throw std::invalid_argument(fmt::format(
      "hvd::{}: Running Adasum with non-power of 2 ranks is not supported yet. ({} ranks)", call,
      ranks));
}

void adasum_allreduce(backend& b, void* data, size_t count, hvd::dtype t, int rank, int ranks) {
  if (ranks <= 1 || count == 0)
    return;
  const size_t esz = hvd::size_of(t);
  static const double tiny = std::sqrt(DBL_MIN);
  std::vector<char> recv(count * esz);
  char* grad = static_cast<char*>(data);
  char* other = recv.data();
  size_t mine = count;
  std::vector<size_t> theirs; // what the neighbour kept, per level
  for (int level = 1; level < ranks; level <<= 1) {
    bool left = (rank & level) == 0;
    size_t first = mine / 2, second = mine - first;
    size_t keep = left ? first : second, give = left ? second : first;
    size_t send_at = left ? keep : 0, recv_at = left ? 0 : give;
    exchange(b, grad + send_at * esz, give * esz, other + recv_at * esz, keep * esz,
             rank ^ level, ranks);
    if (!left) {
      grad += give * esz;
      other += give * esz;
    }
    mine = keep;
    theirs.push_back(give);
    // This group's slot: the dot product and the left and right halves'
    // squared norms, summed over the 2 level ranks that hold the pieces.
    auto d = measure(t, grad, other, mine);
    size_t groups = static_cast<size_t>(ranks / (2 * level));
    size_t g = static_cast<size_t>(rank / (2 * level));
    std::vector<double> sums(3 * groups, 0.0);
    sums[3 * g] = d.ab;
    sums[3 * g + 1] = left ? d.aa : d.bb;
    sums[3 * g + 2] = left ? d.bb : d.aa;
    b.allreduce(sums.data(), sums.size(), hvd::dtype::float64, hvd::op::sum);
    double ab = sums[3 * g];
    double own = left ? sums[3 * g + 1] : sums[3 * g + 2];
    double peer = left ? sums[3 * g + 2] : sums[3 * g + 1];
    double ca = own >= tiny ? 1.0 - ab / own * 0.5 : 1.0;
    double cb = peer >= tiny ? 1.0 - ab / peer * 0.5 : 1.0;
    combine(t, grad, ca, other, cb, mine);
  }
  for (int level = ranks >> 1; level > 0; level >>= 1) {
    bool left = (rank & level) == 0;
    size_t give = theirs.back();
    theirs.pop_back();
    char* back = left ? grad + mine * esz : grad - give * esz;
    exchange(b, grad, mine * esz, back, give * esz, rank ^ level, ranks);
    if (!left)
      grad -= give * esz;
    mine += give;
  }
}

} // namespace hvactor::collectives
