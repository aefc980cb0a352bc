// hvd collectives between real worker processes (2 and 4 ranks, started by
// an hvactor::executor): every op and dtype against a reference computed
// locally, fusion against per-tensor results, topology, size-1 jobs.
// Failures are in collectives_failure_test.cpp.
//
// Worker functions return what they found wrong as text ("" when all is
// well), so that the driver's CHECK shows it.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "hvd_session.hpp"
#include "test_main.hpp"

using namespace std::chrono_literals;

namespace hvd = hvactor::hvd;

namespace {

// --- Worker-side helpers -----------------------------------------------------

using session = hvactor::test::hvd_session;

/// What a worker found wrong; the first few entries verbatim.
class problems {
public:
  void add(const std::string& what) {
    if (++count_ <= 8)
      text_ += what + "\n";
  }
  std::string report() const {
    if (count_ <= 8)
      return text_;
    return text_ + "... " + std::to_string(count_) + " problems in all\n";
  }

private:
  std::string text_;
  int count_ = 0;
};

template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, hvd::half> || std::is_same_v<T, hvd::bfloat16>;

template <class T>
double as_double(T x) {
  if constexpr (is_16bit_float<T>)
    return static_cast<float>(x);
  else
    return static_cast<double>(x);
}

template <class T>
T from_int(int64_t v) {
  if constexpr (is_16bit_float<T>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T>
constexpr const char* type_name() {
  return hvd::to_string(hvd::dtype_of<T>());
}

template <class T>
bool close(double got, double want) {
  if constexpr (std::is_integral_v<T>)
    return got == want;
  double tol = std::is_same_v<T, hvd::bfloat16> ? 1e-2
               : std::is_same_v<T, hvd::half>   ? 1e-3
               : std::is_same_v<T, float>       ? 1e-6
                                                : 1e-12;
  return std::abs(got - want) <= tol * std::max(1.0, std::abs(want));
}

std::string at(const char* what, size_t i, double got, double want) {
  std::ostringstream out;
  out << "rank " << hvd::rank() << ": " << what << "[" << i << "] = " << got << ", expected "
      << want;
  return out.str();
}

/// Rank `rank`'s element `i`: small integers, so that every dtype carries
/// sums and products exactly, with negatives for min and for averages that
/// truncate.
int64_t input(int rank, size_t i, hvd::op o) {
  auto r = static_cast<int64_t>(rank);
  auto k = static_cast<int64_t>(i);
  if (o == hvd::op::product)
    return (1 + (r + k) % 2) * ((r + k) % 5 == 0 ? -1 : 1);
  return (r + 1) * (k % 7 - 3);
}

/// What allreduce of `input` over `n` ranks gives; integer averages
/// truncate toward zero (hvd_types.hpp).
double reference(int n, size_t i, hvd::op o, bool integer) {
  int64_t acc = input(0, i, o);
  for (int r = 1; r < n; ++r) {
    int64_t v = input(r, i, o);
    switch (o) {
      case hvd::op::sum:
      case hvd::op::average:
        acc += v;
        break;
      case hvd::op::min:
        acc = std::min(acc, v);
        break;
      case hvd::op::max:
        acc = std::max(acc, v);
        break;
      case hvd::op::product:
        acc *= v;
        break;
    }
  }
  if (o != hvd::op::average)
    return static_cast<double>(acc);
  return integer ? static_cast<double>(acc / n) : static_cast<double>(acc) / n;
}

/// reference() in T's own arithmetic where it differs: uint8 wraps
/// (negative inputs become large), so its sums, products, minima and
/// averages are those of the wrapped values.
template <class T>
double reference_as(int n, size_t i, hvd::op o) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    auto acc = static_cast<uint8_t>(input(0, i, o));
    for (int r = 1; r < n; ++r) {
      auto v = static_cast<uint8_t>(input(r, i, o));
      acc = o == hvd::op::min       ? std::min(acc, v)
            : o == hvd::op::max     ? std::max(acc, v)
            : o == hvd::op::product ? static_cast<uint8_t>(acc * v)
                                    : static_cast<uint8_t>(acc + v);
    }
    return o == hvd::op::average ? static_cast<double>(acc / n) : static_cast<double>(acc);
  } else {
    return reference(n, i, o, std::is_integral_v<T>);
  }
}

template <class T>
void check_allreduce(problems& found, hvd::op o, size_t count) {
  std::vector<T> x(count);
  for (size_t i = 0; i < count; ++i)
    x[i] = from_int<T>(input(hvd::rank(), i, o));
  hvd::allreduce(std::span<T>(x), o);
  std::string what = std::string{"allreduce "} + type_name<T>() + " x " + std::to_string(count)
                     + " " + hvd::to_string(o);
  for (size_t i = 0; i < count; ++i) {
    double want = reference_as<T>(hvd::size(), i, o);
    if (!close<T>(as_double(x[i]), want))
      found.add(at(what.c_str(), i, as_double(x[i]), want));
  }
}

constexpr hvd::op all_ops[] = {hvd::op::sum, hvd::op::average, hvd::op::min, hvd::op::max,
                               hvd::op::product};

/// Every dtype x op x size, each against the local reference. 4099 and
/// 70001 elements take Gloo's bcube path on 2 ranks, the others the ring.
std::string allreduce_every_dtype_and_op() {
  session s;
  problems found;
  for (auto o : all_ops) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{4099},
                         size_t{70001}}) {
      check_allreduce<float>(found, o, count);
      check_allreduce<double>(found, o, count);
      check_allreduce<int32_t>(found, o, count);
      check_allreduce<int64_t>(found, o, count);
      check_allreduce<hvd::half>(found, o, count);
      check_allreduce<hvd::bfloat16>(found, o, count);
      check_allreduce<int16_t>(found, o, count);
      check_allreduce<int8_t>(found, o, count);
      check_allreduce<uint8_t>(found, o, count);
    }
  }
  return found.report();
}

/// bool: sum and max are "or", product and min "and", on any backend; an
/// average is refused before anything is sent, so the ranks stay in step.
std::string bool_reductions() {
  session s;
  problems found;
  int r = hvd::rank(), n = hvd::size();
  bool any[3] = {r == 0, false, r == n - 1};
  hvd::allreduce(std::span<bool>(any, 3), hvd::op::sum);
  if (!any[0] || any[1] || !any[2])
    found.add("rank " + std::to_string(r) + ": bool sum is not 'or'");
  bool all[2] = {true, r != 0};
  hvd::allreduce(std::span<bool>(all, 2), hvd::op::product);
  if (!all[0] || all[1])
    found.add("rank " + std::to_string(r) + ": bool product is not 'and'");
  try {
    hvd::allreduce(std::span<bool>(all, 2), hvd::op::average);
    found.add("the average of bools did not throw");
  } catch (const std::invalid_argument& e) {
    if (std::string{e.what()}.find("op::average is not defined") == std::string::npos)
      found.add(std::string{"average of bools: "} + e.what());
  }
  auto h = hvd::allreduce_async(std::span<bool>(any, 3), hvd::op::max, "flags");
  hvd::synchronize(h);
  if (!any[0] || any[1] || !any[2])
    found.add("rank " + std::to_string(r) + ": async bool max is not 'or'");
  return found.report();
}

/// Integer average of one element: `mine` on rank 0, 0 elsewhere.
std::vector<int64_t> integer_average(int64_t mine) {
  session s;
  int32_t a = hvd::rank() == 0 ? static_cast<int32_t>(mine) : 0;
  int64_t b = hvd::rank() == 0 ? mine : 0;
  hvd::allreduce(std::span<int32_t>(&a, 1), hvd::op::average);
  hvd::allreduce(std::span<int64_t>(&b, 1), hvd::op::average);
  return {a, b};
}

template <class T>
void check_average_is_sum_over_size(problems& found) {
  std::vector<T> sum(5000);
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = static_cast<T>(std::sin(0.37 * static_cast<double>(i) + hvd::rank()) * 100.0);
  auto average = sum;
  hvd::allreduce(std::span<T>(sum), hvd::op::sum);
  hvd::allreduce(std::span<T>(average), hvd::op::average);
  for (size_t i = 0; i < sum.size(); ++i) {
    double want = static_cast<double>(sum[i]) / hvd::size();
    if (!close<T>(static_cast<double>(average[i]), want))
      found.add(at("average", i, static_cast<double>(average[i]), want));
  }
}

std::string average_is_sum_over_size() {
  session s;
  problems found;
  check_average_is_sum_over_size<float>(found);
  check_average_is_sum_over_size<double>(found);
  return found.report();
}

template <class T>
void check_broadcast(problems& found, int root) {
  std::vector<T> x(3001);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = from_int<T>(hvd::rank() * 100 + static_cast<int64_t>(i % 100));
  hvd::broadcast(std::span<T>(x), root);
  std::string what = std::string{"broadcast "} + type_name<T>() + " from " + std::to_string(root);
  for (size_t i = 0; i < x.size(); ++i) {
    // Root's value as T holds it (exact in half; rounded in bfloat16,
    // wrapped in uint8 and int8): a broadcast moves bits.
    double want = as_double(from_int<T>(root * 100 + static_cast<int64_t>(i % 100)));
    if (as_double(x[i]) != want)
      found.add(at(what.c_str(), i, as_double(x[i]), want));
  }
}

std::string broadcast_from_roots() {
  session s;
  problems found;
  for (int root : {1, 0, hvd::size() - 1}) {
    check_broadcast<float>(found, root);
    check_broadcast<int64_t>(found, root);
    check_broadcast<hvd::half>(found, root);
    check_broadcast<hvd::bfloat16>(found, root);
    check_broadcast<uint8_t>(found, root);
    check_broadcast<int16_t>(found, root);
  }
  // An invalid root is refused locally, before anything is sent ...
  std::vector<float> x(4, 1.0f);
  for (int root : {-1, hvd::size()}) {
    try {
      hvd::broadcast(std::span<float>(x), root);
      found.add("broadcast from root " + std::to_string(root) + " did not throw");
    } catch (const std::invalid_argument&) {
    }
  }
  // ... so the ranks stay in step.
  check_broadcast<double>(found, 1);
  return found.report();
}

/// Rank r contributes counts[r] elements r * 100 + i; the result must be
/// all of them in rank order.
template <class T>
void check_allgather(problems& found, const std::vector<int>& counts, const char* label) {
  int me = hvd::rank();
  std::vector<T> mine(static_cast<size_t>(counts[static_cast<size_t>(me)]));
  for (size_t i = 0; i < mine.size(); ++i)
    mine[i] = from_int<T>(me * 100 + static_cast<int64_t>(i));
  auto got = hvd::allgather(std::span<const T>(mine));
  std::vector<double> want;
  for (int r = 0; r < hvd::size(); ++r)
    for (int i = 0; i < counts[static_cast<size_t>(r)]; ++i)
      want.push_back(as_double(from_int<T>(r * 100 + i)));
  std::string what = std::string{"allgather "} + type_name<T>() + " " + label;
  if (got.size() != want.size()) {
    found.add("rank " + std::to_string(me) + ": " + what + " returned " +
              std::to_string(got.size()) + " elements, expected " + std::to_string(want.size()));
    return;
  }
  for (size_t i = 0; i < got.size(); ++i)
    if (as_double(got[i]) != want[i])
      found.add(at(what.c_str(), i, as_double(got[i]), want[i]));
}

std::string allgather_in_rank_order() {
  session s;
  problems found;
  auto n = static_cast<size_t>(hvd::size());
  std::vector<int> equal(n, 5), growing(n), one_empty(n), all_empty(n, 0);
  for (size_t r = 0; r < n; ++r) {
    growing[r] = static_cast<int>(r) + 1;
    one_empty[r] = r == 1 ? 0 : static_cast<int>(r) + 1;
  }
  check_allgather<double>(found, equal, "equal");
  check_allgather<int32_t>(found, equal, "equal");
  check_allgather<float>(found, growing, "r+1");
  check_allgather<int64_t>(found, growing, "r+1");
  check_allgather<hvd::half>(found, growing, "r+1");
  check_allgather<hvd::bfloat16>(found, growing, "r+1");
  check_allgather<uint8_t>(found, growing, "r+1");
  check_allgather<int8_t>(found, equal, "equal");
  check_allgather<int16_t>(found, growing, "r+1");
  check_allgather<double>(found, one_empty, "rank 1 empty");
  check_allgather<int32_t>(found, all_empty, "all empty");
  // Into a caller's buffer (equal counts): the same order, nothing else
  // written; a buffer of the wrong size and unequal counts are refused.
  int me = hvd::rank();
  std::vector<float> in(3), out(3 * n + 1, -1.0f);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<float>(me * 100 + static_cast<int>(i));
  hvd::allgather(std::span<const float>(in), std::span<float>(out.data(), 3 * n));
  for (size_t i = 0; i < 3 * n; ++i)
    if (out[i] != static_cast<float>((i / 3) * 100 + i % 3))
      found.add(at("allgather into a buffer", i, out[i], static_cast<double>((i / 3) * 100 + i % 3)));
  if (out[3 * n] != -1.0f)
    found.add("allgather into a buffer wrote past size() x count");
  try {
    hvd::allgather(std::span<const float>(in), std::span<float>(out));
    found.add("allgather into a buffer of the wrong size did not throw");
  } catch (const std::invalid_argument&) {
  }
  std::vector<float> uneven(static_cast<size_t>(me) + 1), wide(n * n);
  try {
    hvd::allgather(std::span<const float>(uneven), std::span<float>(wide.data(), uneven.size() * n));
    found.add("allgather into a buffer with unequal counts did not throw");
  } catch (const std::invalid_argument& e) {
    if (std::string{e.what()}.find("every rank must pass the same count") == std::string::npos)
      found.add(std::string{"unequal counts: "} + e.what());
  }
  // Still in step afterwards.
  check_allgather<double>(found, equal, "after the refused calls");
  return found.report();
}

/// Rank 0 creates a file late, before the barrier; after it, every rank
/// must see the file.
std::string barrier_orders(std::string dir) {
  session s;
  problems found;
  auto marker = std::filesystem::path(dir) / "before-barrier";
  if (hvd::rank() == 0) {
    std::this_thread::sleep_for(300ms);
    std::ofstream{marker} << "rank 0 was here\n";
  }
  hvd::barrier();
  if (!std::filesystem::exists(marker))
    found.add("rank " + std::to_string(hvd::rank()) + " left the barrier before rank 0 entered");
  for (int i = 0; i < 10; ++i)
    hvd::barrier();
  return found.report();
}

std::string alltoall_parts() {
  session s;
  problems found;
  int me = hvd::rank(), n = hvd::size();
  // Equal split: element j goes to rank j / 3.
  std::vector<int32_t> x(static_cast<size_t>(3 * n));
  for (size_t j = 0; j < x.size(); ++j)
    x[j] = me * 1000 + static_cast<int32_t>(j);
  auto got = hvd::alltoall(std::span<const int32_t>(x));
  if (got.size() != x.size())
    found.add("equal alltoall returned " + std::to_string(got.size()) + " elements");
  for (size_t j = 0; j < std::min(got.size(), x.size()); ++j) {
    int src = static_cast<int>(j / 3);
    double want = src * 1000 + me * 3 + static_cast<int>(j % 3);
    if (got[j] != want)
      found.add(at("alltoall", j, got[j], want));
  }
  // Variable split: rank s sends (s + d) % 3 elements to rank d (some 0).
  auto part = [](int src, int dst) { return static_cast<int64_t>((src + dst) % 3); };
  std::vector<int64_t> sends;
  std::vector<double> y;
  for (int d = 0; d < n; ++d) {
    sends.push_back(part(me, d));
    for (int64_t t = 0; t < part(me, d); ++t)
      y.push_back(me * 1000 + d * 10 + static_cast<double>(t));
  }
  std::vector<int64_t> recv_counts;
  auto got_v = hvd::alltoall(std::span<const double>(y), std::span<const int64_t>(sends),
                             &recv_counts);
  std::vector<int64_t> want_counts;
  std::vector<double> want;
  for (int src = 0; src < n; ++src) {
    want_counts.push_back(part(src, me));
    for (int64_t t = 0; t < part(src, me); ++t)
      want.push_back(src * 1000 + me * 10 + static_cast<double>(t));
  }
  if (recv_counts != want_counts)
    found.add("rank " + std::to_string(me) + ": alltoall recv_counts differ");
  if (got_v != want)
    found.add("rank " + std::to_string(me) + ": variable alltoall returned other elements");
  // Bad splits are refused locally.
  std::vector<float> odd(static_cast<size_t>(n) + 1);
  try {
    hvd::alltoall(std::span<const float>(odd));
    found.add("alltoall of size() + 1 elements did not throw");
  } catch (const std::invalid_argument&) {
  }
  std::vector<int64_t> short_counts(static_cast<size_t>(n), 0);
  try {
    hvd::alltoall(std::span<const float>(odd), std::span<const int64_t>(short_counts));
    found.add("alltoall with send_counts not summing to the size did not throw");
  } catch (const std::invalid_argument&) {
  }
  return found.report();
}

using tensor = std::variant<std::vector<float>, std::vector<double>, std::vector<int32_t>>;

/// Tensor i of the fusion test: sizes, dtypes (in runs of ten, so that
/// neighbours fuse) and ops (sum, average, max) mixed.
tensor make_tensor(size_t i, int rank) {
  static constexpr size_t sizes[] = {1, 7, 100, 1000, 4099, 0, 33, 16387, 2, 257};
  size_t count = sizes[i % std::size(sizes)];
  auto fill = [&](auto v) {
    for (size_t j = 0; j < count; ++j)
      v.push_back(static_cast<typename decltype(v)::value_type>(
        (rank + 1) * (static_cast<int64_t>((i * 31 + j) % 11) - 5)));
    return tensor{std::move(v)};
  };
  switch ((i / 10) % 3) {
    case 0:
      return fill(std::vector<float>{});
    case 1:
      return fill(std::vector<double>{});
    default:
      return fill(std::vector<int32_t>{});
  }
}

hvd::op op_of(size_t i) {
  if (i % 50 >= 45)
    return hvd::op::max;
  return i % 3 == 1 ? hvd::op::average : hvd::op::sum;
}

/// 200 async allreduces, synchronized last to first, equal the same
/// tensors reduced one by one; so does a grouped allreduce.
std::string fused_equals_per_tensor() {
  session s;
  problems found;
  constexpr size_t n = 200;
  std::vector<tensor> fused, single;
  for (size_t i = 0; i < n; ++i) {
    fused.push_back(make_tensor(i, hvd::rank()));
    single.push_back(fused.back());
  }
  for (size_t i = 0; i < n; ++i)
    std::visit([&](auto& v) { hvd::allreduce(std::span(v), op_of(i)); }, single[i]);
  std::vector<hvd::handle> handles;
  for (size_t i = 0; i < n; ++i)
    std::visit(
      [&](auto& v) {
        // Every third one unnamed: it gets "allreduce.<n>".
        std::string name = i % 3 == 2 ? "" : "grad/" + std::to_string(i);
        handles.push_back(hvd::allreduce_async(std::span(v), op_of(i), name));
      },
      fused[i]);
  for (size_t i = n; i-- > 0;) {
    hvd::synchronize(handles[i]);
    if (!handles[i].ready())
      found.add("handle " + std::to_string(i) + " not ready after synchronize");
    auto& name = handles[i].name();
    if (i % 3 == 2 ? name.rfind("allreduce.", 0) != 0 : name != "grad/" + std::to_string(i))
      found.add("handle " + std::to_string(i) + " is named '" + name + "'");
  }
  for (size_t i = 0; i < n; ++i)
    if (fused[i] != single[i])
      found.add("rank " + std::to_string(hvd::rank()) + ": fused tensor " + std::to_string(i) +
                " differs from its own allreduce");
  // grouped_allreduce: 20 float tensors, default op (average).
  std::vector<std::vector<float>> group, alone;
  for (size_t i = 0; i < 20; ++i) {
    group.push_back(std::get<std::vector<float>>(make_tensor(i % 10, hvd::rank())));
    alone.push_back(group.back());
    hvd::allreduce(std::span<float>(alone.back()));
  }
  std::vector<std::span<float>> spans(group.begin(), group.end());
  hvd::grouped_allreduce(spans);
  if (group != alone)
    found.add("rank " + std::to_string(hvd::rank()) + ": grouped_allreduce differs");
  return found.report();
}

/// struct with inspect: what hvd says about this rank, and what the env says.
struct placement_seen {
  std::vector<int> from_hvd;
  std::vector<int> from_env;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_seen& x) {
  return f(caf::meta::type_name("placement_seen"), x.from_hvd, x.from_env);
}

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

placement_seen hvd_placement() {
  session s;
  return {{hvd::rank(), hvd::size(), hvd::local_rank(), hvd::local_size(), hvd::cross_rank(),
           hvd::cross_size()},
          {env_int("HOROVOD_RANK"), env_int("HOROVOD_SIZE"), env_int("HOROVOD_LOCAL_RANK"),
           env_int("HOROVOD_LOCAL_SIZE"), env_int("HOROVOD_CROSS_RANK"),
           env_int("HOROVOD_CROSS_SIZE")}};
}

/// init, allreduce, shutdown, twice over: the second connection works too.
std::string reinit_allreduces() {
  problems found;
  for (int round = 0; round < 2; ++round) {
    hvd::init();
    hvd::init(); // idempotent
    std::vector<int64_t> x(1000, hvd::rank() + 1);
    hvd::allreduce(std::span<int64_t>(x), hvd::op::sum);
    int64_t want = hvd::size() * (hvd::size() + 1) / 2;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != want)
        found.add(at("re-init allreduce", i, static_cast<double>(x[i]), static_cast<double>(want)));
    hvd::shutdown();
    if (hvd::is_initialized())
      found.add("is_initialized() after shutdown()");
  }
  return found.report();
}

// --- Driver-side helpers -----------------------------------------------------

hvactor::settings job_settings() {
  return hvactor::executor::create_settings({.timeout = 20s, .placement_timeout = 20s});
}

/// Runs `body(ex, n)` on a started job of 2 and one of 4 workers.
template <class Body>
void on_2_and_4_ranks(Body&& body, std::map<std::string, std::string> env = {}) {
  for (int n : {2, 4}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), job_settings(),
                         {.num_workers = n, .extra_env_vars = env}};
    ex.start();
    body(ex, n);
    ex.shutdown();
  }
}

/// Every rank's report must be empty.
void check_clean(const std::vector<std::string>& reports, size_t ranks) {
  REQUIRE(reports.size() == ranks);
  for (size_t r = 0; r < reports.size(); ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(reports[r].empty(), reports[r]);
  }
}

void unset_horovod_env() {
  for (auto* name : {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                     "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
                     "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT"})
    ::unsetenv(name);
}

} // namespace

TEST_SUITE("hvd collectives") {

TEST_CASE("allreduce of every dtype and op equals a reference computed locally") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    check_clean(ex.run(&allreduce_every_dtype_and_op), static_cast<size_t>(n));
  });
}

TEST_CASE("allreduce gives the same results over Gloo with its algorithm chosen (4-32 KiB calls "
          "then travel with the negotiation header on the small-message lane) or ring, bcube, "
          "gather or doubling forced") {
  for (const char* algorithm : {"auto", "ring", "bcube", "gather", "doubling"}) {
    CAPTURE(algorithm);
    on_2_and_4_ranks(
      [](hvactor::executor& ex, int n) {
        check_clean(ex.run(&allreduce_every_dtype_and_op), static_cast<size_t>(n));
      },
      // Over Gloo: shared memory would take every allreduce otherwise.
      {{"HVACTOR_GLOO_ALLREDUCE", algorithm}, {"HVACTOR_SHM", "0"}});
  }
}

TEST_CASE("bool reduces as or (sum, max) and and (product, min); its average is refused") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    check_clean(ex.run(&bool_reductions), static_cast<size_t>(n));
  });
}

TEST_CASE("integer average truncates toward zero") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    // -3 / 2 = -1 and 3 / 2 = 1; -3 / 4 = 0 and 3 / 4 = 0.
    auto down = ex.run(&integer_average, int64_t{-3});
    auto up = ex.run(&integer_average, int64_t{3});
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      CHECK(down[static_cast<size_t>(r)] == std::vector<int64_t>(2, -3 / n));
      CHECK(up[static_cast<size_t>(r)] == std::vector<int64_t>(2, 3 / n));
    }
  });
}

TEST_CASE("average equals sum divided by size for float and double") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    check_clean(ex.run(&average_is_sum_over_size), static_cast<size_t>(n));
  });
}

TEST_CASE("broadcast from root 1, root 0 and the last rank overwrites every rank; an invalid "
          "root throws invalid_argument locally") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    check_clean(ex.run(&broadcast_from_roots), static_cast<size_t>(n));
  });
}

TEST_CASE("allgather returns every rank's elements in rank order, for equal, different and "
          "empty contributions") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    check_clean(ex.run(&allgather_in_rank_order), static_cast<size_t>(n));
  });
}

TEST_CASE("barrier holds every rank until all arrived; alltoall sends equal and variable parts "
          "and reports the counts received") {
  auto dir = std::filesystem::temp_directory_path() / ("hvactor-barrier-" + std::to_string(::getpid()));
  on_2_and_4_ranks([&](hvactor::executor& ex, int n) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    check_clean(ex.run(&barrier_orders, dir.string()), static_cast<size_t>(n));
    check_clean(ex.run(&alltoall_parts), static_cast<size_t>(n));
  });
  std::filesystem::remove_all(dir);
}

TEST_CASE("200 fused async allreduces of mixed sizes, dtypes and ops equal the per-tensor "
          "results, with any fusion threshold and cycle time") {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> variants = {
    {"defaults", {}},
    {"fusion off", {{"HOROVOD_FUSION_THRESHOLD", "0"}}},
    {"4 KiB threshold", {{"HOROVOD_FUSION_THRESHOLD", "4096"}}},
    {"5 ms cycle", {{"HOROVOD_CYCLE_TIME", "5"}}},
  };
  for (auto& [label, env] : variants) {
    CAPTURE(label);
    on_2_and_4_ranks(
      [](hvactor::executor& ex, int n) {
        check_clean(ex.run(&fused_equals_per_tensor), static_cast<size_t>(n));
      },
      env);
  }
}

TEST_CASE("rank, size, local and cross ranks match the HOROVOD_* environment; init, shutdown, "
          "init again works in every worker") {
  on_2_and_4_ranks([](hvactor::executor& ex, int n) {
    auto seen = ex.run(&hvd_placement);
    REQUIRE(seen.size() == static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      auto& s = seen[static_cast<size_t>(r)];
      CHECK(s.from_hvd == s.from_env);
      CHECK(s.from_hvd == std::vector<int>{r, n, r, n, 0, 1});
    }
    check_clean(ex.run(&reinit_allreduces), static_cast<size_t>(n));
  });
}

TEST_CASE("without a job environment hvd::init makes a job of one rank") {
  unset_horovod_env();
  hvd::shutdown(); // a no-op unless an earlier case left it open
  CHECK_THROWS_AS(hvd::rank(), hvactor::not_started);
  hvd::init();
  hvd::init(); // idempotent
  CHECK(hvd::is_initialized());
  CHECK(hvd::rank() == 0);
  CHECK(hvd::size() == 1);
  CHECK(hvd::local_rank() == 0);
  CHECK(hvd::local_size() == 1);
  CHECK(hvd::cross_rank() == 0);
  CHECK(hvd::cross_size() == 1);
  std::vector<double> x{1.5, -2.0, 3.25};
  for (auto o : all_ops) {
    auto y = x;
    hvd::allreduce(std::span<double>(y), o);
    CHECK(y == x);
  }
  std::vector<int32_t> ints{7, -8, 9};
  auto h = hvd::allreduce_async(std::span<int32_t>(ints), hvd::op::sum, "solo");
  hvd::synchronize(h);
  CHECK(ints == std::vector<int32_t>{7, -8, 9});
  CHECK(hvd::allgather(std::span<const double>(x)) == x);
  CHECK(hvd::alltoall(std::span<const int32_t>(ints)) == ints);
  hvd::broadcast(std::span<double>(x), 0);
  CHECK(x == std::vector<double>{1.5, -2.0, 3.25});
  CHECK_THROWS_AS(hvd::broadcast(std::span<double>(x), 1), std::invalid_argument);
  CHECK_NOTHROW(hvd::barrier());
  hvd::shutdown();
  CHECK_FALSE(hvd::is_initialized());
  CHECK_THROWS_AS(hvd::allreduce(std::span<double>(x)), hvactor::not_started);
  // shutdown() then init() works again.
  CHECK(reinit_allreduces() == "");
  CHECK_FALSE(hvd::is_initialized());
}

} // TEST_SUITE
