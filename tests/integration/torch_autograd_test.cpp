// The differentiable collectives of hvd::autograd in real workers at 2 and
// 3 ranks: grouped_allreduce, alltoall (uneven splits) and reducescatter
// (uneven rows), forward and backward, against Horovod's gradients worked
// out by hand and against one process's autograd over every rank's inputs
// (Horovod's test_horovod_grouped_allreduce_grad, test_horovod_alltoall_grad*,
// test_horovod_reducescatter_grad*).

#include <cstdint>
#include <string>
#include <vector>

// LibTorch first: it defines glog's CHECK, which must not replace doctest's.
#include <hvactor/torch.hpp>
#undef CHECK
#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "test_main.hpp"

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.sizes() != b.sizes())
    return 1e30;
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

// Rank k's i-th input, computable on any rank (the reference's inputs).
torch::Tensor grouped_input(int k, int i) {
  std::vector<std::vector<int64_t>> shapes{{5}, {2, 3}, {4, 1, 2}};
  auto s = shapes[static_cast<size_t>(i)];
  int64_t numel = 1;
  for (auto d : s)
    numel *= d;
  return torch::arange(numel, torch::kDouble).reshape(s).mul(k + 1).add(i);
}

/// In a worker: grouped_allreduce of 3 tensors of different shapes, sum
/// with factors and average; each rank's loss weighs output i by
/// (rank + 1) (i + 1), so the gradient (the grouped allreduce of the
/// weights) is known by hand. And Horovod's test: ones back give size()
/// (sum) or 1 (average).
std::vector<std::string> grouped_allreduce_grad() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  struct variant {
    hvd::op o;
    hvd::scale_factors f;
    const char* what;
  };
  for (auto [o, f, what] : {variant{hvd::op::sum, {}, "sum"},
                            variant{hvd::op::sum, {0.5, 3.0}, "sum, factors 0.5 and 3"},
                            variant{hvd::op::average, {}, "average"},
                            variant{hvd::op::average, {2.0, 0.25}, "average, factors 2 and 0.25"}}) {
    double scale = f.prescale_factor * f.postscale_factor * (o == hvd::op::average ? 1.0 / n : 1.0);
    std::vector<torch::Tensor> xs;
    for (int i = 0; i < 3; ++i)
      xs.push_back(grouped_input(r, i).requires_grad_(true));
    auto ys = hvd::autograd::grouped_allreduce(xs, o, f);
    bool forward = ys.size() == 3, backward = true;
    torch::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int i = 0; i < 3 && forward; ++i) {
      auto sum = torch::zeros_like(xs[static_cast<size_t>(i)]);
      for (int k = 0; k < n; ++k)
        sum += grouped_input(k, i);
      forward = forward && max_diff(ys[static_cast<size_t>(i)], sum * scale) < 1e-9;
      loss = loss + (ys[static_cast<size_t>(i)] * double((r + 1) * (i + 1))).sum();
    }
    loss.backward();
    for (int i = 0; i < 3; ++i) {
      // sum over k of (k + 1)(i + 1), through the same op and factors.
      double g = scale * (i + 1) * n * (n + 1) / 2.0;
      auto& x = xs[static_cast<size_t>(i)];
      backward = backward && max_diff(x.grad(), torch::full_like(x, g)) < 1e-9;
    }
    expect(forward, std::string{"grouped_allreduce forward, "} + what);
    expect(backward, std::string{"grouped_allreduce gradient is the grouped allreduce of the "
                                 "outputs' gradients, "} +
                       what);
  }
  // Horovod's test: every output backwarded alone with ones.
  for (auto o : {hvd::op::sum, hvd::op::average}) {
    std::vector<torch::Tensor> xs;
    for (int i = 0; i < 3; ++i)
      xs.push_back(torch::ones({17, 17}, torch::kFloat).requires_grad_(true));
    for (auto& y : hvd::autograd::grouped_allreduce(xs, o))
      y.backward(torch::ones_like(y));
    bool ok = true;
    for (auto& x : xs)
      ok = ok && max_diff(x.grad(), torch::full_like(x, o == hvd::op::sum ? n : 1)) < 1e-6;
    expect(ok, o == hvd::op::sum ? "ones back give size() (sum)" : "ones back give 1 (average)");
  }
  hvd::shutdown();
  return out;
}

// Rank k's alltoall splits: (k + i) % n rows to rank i (a 0 among them).
std::vector<int64_t> splits_of(int k, int n) {
  std::vector<int64_t> s;
  for (int i = 0; i < n; ++i)
    s.push_back((k + i) % n + (i == 0 ? 1 : 0));
  return s;
}

int64_t total(const std::vector<int64_t>& s) {
  int64_t t = 0;
  for (auto v : s)
    t += v;
  return t;
}

torch::Tensor alltoall_input(int k, int n) {
  auto rows = total(splits_of(k, n));
  return torch::arange(rows * 2, torch::kFloat).reshape({rows, 2}).add(100 * k);
}

// What rank i receives and the weights of its loss, sum(y * weights(i)).
torch::Tensor alltoall_weights(int i, int64_t rows) {
  return torch::arange(rows * 2, torch::kFloat).reshape({rows, 2}).cos().mul(i + 1);
}

/// In a worker: alltoall with uneven splits (a 0 among them) and with
/// equal splits; forward rows and received splits, and the gradient
/// against one process's autograd over the same exchange written with
/// narrow and cat.
std::vector<std::string> alltoall_grad() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  // The reference: every rank's input, the exchange as narrow + cat.
  std::vector<torch::Tensor> xs_ref;
  for (int k = 0; k < n; ++k)
    xs_ref.push_back(alltoall_input(k, n).requires_grad_(true));
  torch::Tensor ref_loss = torch::zeros({});
  torch::Tensor mine_ref;
  for (int i = 0; i < n; ++i) {
    std::vector<torch::Tensor> parts;
    for (int k = 0; k < n; ++k) {
      auto s = splits_of(k, n);
      int64_t offset = 0;
      for (int j = 0; j < i; ++j)
        offset += s[static_cast<size_t>(j)];
      parts.push_back(xs_ref[static_cast<size_t>(k)].narrow(0, offset, s[static_cast<size_t>(i)]));
    }
    auto y = torch::cat(parts);
    if (i == r)
      mine_ref = y.detach();
    ref_loss = ref_loss + (y * alltoall_weights(i, y.size(0))).sum();
  }
  ref_loss.backward();
  auto x = alltoall_input(r, n).requires_grad_(true);
  std::vector<int64_t> received;
  auto y = hvd::autograd::alltoall(x, splits_of(r, n), &received);
  std::vector<int64_t> want;
  for (int k = 0; k < n; ++k)
    want.push_back(splits_of(k, n)[static_cast<size_t>(r)]);
  expect(max_diff(y, mine_ref) == 0 && received == want,
         "alltoall forward: the rows and the received splits");
  (y * alltoall_weights(r, y.size(0))).sum().backward();
  expect(max_diff(x.grad(), xs_ref[static_cast<size_t>(r)].grad()) == 0,
         "alltoall gradient: every row's gradient came back from the rank it went to");
  // Horovod's test_horovod_alltoall_equal_split_grad: ones back give ones.
  auto e = torch::arange(2 * n * 3, torch::kDouble).reshape({2 * n, 3}).requires_grad_(true);
  auto ye = hvd::autograd::alltoall(e);
  ye.backward(torch::ones_like(ye));
  expect(max_diff(e.grad(), torch::ones_like(e)) == 0, "alltoall, equal splits: ones back give ones");
  hvd::shutdown();
  return out;
}

torch::Tensor reducescatter_input(int k, int64_t rows) {
  return torch::arange(rows * 3, torch::kDouble).reshape({rows, 3}).sin().mul(k + 1);
}

/// In a worker: reducescatter of 2n + 1 rows (uneven parts), sum and
/// average, with and without factors: forward against one process's sum,
/// gradient against Horovod's (the allgather of the gradients, times
/// size() for sum, times both factors) and, as a cross-check, against one
/// process's autograd of the ranks' summed losses (Horovod's is size()
/// times that).
std::vector<std::string> reducescatter_grad() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  int64_t rows = 2 * n + 1;
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto part_rows = [&](int k) { return rows / n + (k < rows % n ? 1 : 0); };
  auto weights = [&](int k) {
    return torch::arange(part_rows(k) * 3, torch::kDouble).reshape({part_rows(k), 3}).cos() + k;
  };
  struct variant {
    hvd::op o;
    hvd::scale_factors f;
    const char* what;
  };
  for (auto [o, f, what] : {variant{hvd::op::sum, {}, "sum"},
                            variant{hvd::op::sum, {0.5, 3.0}, "sum, factors 0.5 and 3"},
                            variant{hvd::op::average, {}, "average"},
                            variant{hvd::op::average, {2.0, 0.25}, "average, factors 2 and 0.25"}}) {
    double factors = f.prescale_factor * f.postscale_factor;
    double scale = factors * (o == hvd::op::average ? 1.0 / n : 1.0);
    std::vector<torch::Tensor> xs_ref, ws;
    torch::Tensor sum = torch::zeros({rows, 3}, torch::kDouble);
    for (int k = 0; k < n; ++k) {
      xs_ref.push_back(reducescatter_input(k, rows).requires_grad_(true));
      sum = sum + xs_ref.back();
      ws.push_back(weights(k));
    }
    auto parts = (sum * scale).split_with_sizes([&] {
      std::vector<int64_t> s;
      for (int k = 0; k < n; ++k)
        s.push_back(part_rows(k));
      return s;
    }());
    torch::Tensor ref_loss = torch::zeros({}, torch::kDouble);
    for (int k = 0; k < n; ++k)
      ref_loss = ref_loss + (parts[static_cast<size_t>(k)] * ws[static_cast<size_t>(k)]).sum();
    ref_loss.backward();
    auto x = reducescatter_input(r, rows).requires_grad_(true);
    auto y = hvd::autograd::reducescatter(x, o, f);
    expect(max_diff(y, parts[static_cast<size_t>(r)].detach()) < 1e-9,
           std::string{"reducescatter forward, "} + what);
    (y * ws[static_cast<size_t>(r)]).sum().backward();
    auto horovod = torch::cat(ws) * (o == hvd::op::sum ? double(n) : 1.0) * factors;
    expect(max_diff(x.grad(), horovod) < 1e-9,
           std::string{"reducescatter gradient is Horovod's allgather of the gradients, "} + what);
    expect(max_diff(x.grad(), xs_ref[static_cast<size_t>(r)].grad() * n) < 1e-9,
           std::string{"reducescatter gradient is size() times one process's, "} + what);
  }
  // Horovod's test: 4 size() rows, ones back give size() (sum), 1 (average).
  for (auto o : {hvd::op::sum, hvd::op::average}) {
    auto x = torch::ones({4 * n, 4 * n}, torch::kFloat).requires_grad_(true);
    auto y = hvd::autograd::reducescatter(x, o);
    y.backward(torch::ones({4, 4 * n}));
    expect(max_diff(x.grad(), torch::full_like(x, o == hvd::op::sum ? n : 1)) == 0,
           o == hvd::op::sum ? "ones back give size() (sum)" : "ones back give 1 (average)");
  }
  hvd::shutdown();
  return out;
}

void each_line_ok(std::vector<std::string> (*fn)(), size_t lines_per_rank) {
  for (int n : {2, 3}) {
    CAPTURE(n);
    hvactor::executor ex{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                         {.num_workers = n}};
    ex.start();
    for (auto& lines : ex.run(fn)) {
      REQUIRE(lines.size() == lines_per_rank);
      for (auto& line : lines) {
        INFO(line);
        CHECK(line.rfind("ok ", 0) == 0);
      }
    }
    ex.shutdown();
  }
}

} // namespace

TEST_SUITE("torch_autograd") {

TEST_CASE("autograd::grouped_allreduce on 2 and 3 ranks: the sum or average of every tensor, and "
          "gradients that are the grouped allreduce of the outputs' gradients with the same op "
          "and factors") {
  each_line_ok(&grouped_allreduce_grad, 10);
}

TEST_CASE("autograd::alltoall on 2 and 3 ranks with uneven splits sends every row's gradient back "
          "to the rank that sent the row, equal to one process's autograd") {
  each_line_ok(&alltoall_grad, 3);
}

TEST_CASE("autograd::reducescatter on 2 and 3 ranks with uneven rows: one process's forward and "
          "Horovod's gradient (the allgather, times size() for sum, times the factors)") {
  each_line_ok(&reducescatter_grad, 14);
}

} // TEST_SUITE
