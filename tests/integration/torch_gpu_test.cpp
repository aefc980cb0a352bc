// The LibTorch adapter on CUDA tensors, in real worker processes (ctest
// `torch_gpu_test`, label gpu). Exits 77 (skipped, with the reason) where
// LibTorch sees no CUDA device: always with Debian's CPU-only LibTorch.
//
// Every path a CUDA tensor can take: NCCL (1 rank), hvd's host-staged path
// (2 ranks sharing one GPU, or HVACTOR_GPU_OPERATIONS=GLOO), and CPU copies
// made by the adapter when the job has no device backend
// (HVACTOR_GPU_OPERATIONS=NONE). A training step through
// distributed_optimizer on the GPU must match one process training on the
// CPU on the whole batch within 1e-5. Issue 59 (never run on a GPU yet):
// reducescatter, alltoall, Adasum and join on CUDA tensors on every path;
// sparse gradients and the Adasum optimizer on CUDA parameters.

#define DOCTEST_CONFIG_IMPLEMENT

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

// LibTorch first: it defines glog's CHECK, which must not replace doctest's.
#include <hvactor/torch.hpp>
#include <hvactor/torch_state.hpp>

#include "optimizer_references.hpp"
#include "torch_shards.hpp"
#undef CHECK
#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

hvactor::runtime* rt = nullptr;

torch::Device gpu() {
  return {torch::kCUDA, static_cast<torch::DeviceIndex>(hvd::gpu_available() ? hvd::gpu_device() : 0)};
}

template <class... A>
auto run_on(int workers, const std::string& ops, auto fn, A... args) {
  hvactor::executor ex{*rt, hvactor::executor::create_settings({.timeout = 60s}),
                       {.num_workers = workers,
                        .extra_env_vars = {{"HVACTOR_GPU_OPERATIONS", ops}}}};
  ex.start();
  auto all = ex.run(fn, args...);
  ex.shutdown();
  return all;
}

// In a worker: every tensor collective on CUDA tensors; returns the
// backend, then one number per check (the test knows each expected value).
std::vector<std::string> cuda_tensor_ops() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  std::vector<std::string> out{hvd::gpu_backend()};
  auto num = [&](const torch::Tensor& t) { out.push_back(std::to_string(t.item<double>())); };
  auto a = torch::full({1000, 3}, float(r + 1), torch::TensorOptions().device(gpu()));
  hvd::allreduce(a, hvd::op::sum);
  num(a.sum()); // 3000 n(n+1)/2
  auto t = torch::arange(6, torch::TensorOptions().dtype(torch::kDouble).device(gpu()))
             .reshape({2, 3})
             .t(); // non-contiguous
  t.add_(r);
  hvd::allreduce(t, hvd::op::average);
  num(t[2][1]); // 5 + (n-1)/2
  auto g = hvd::allgather(torch::full({r + 1, 2}, int64_t{r},
                                      torch::TensorOptions().dtype(torch::kLong).device(gpu())));
  out.push_back(g.device().str());
  num(torch::tensor(double(g.size(0)))); // n(n+1)/2 rows
  num(g.sum());                          // sum of 2 r (r+1)
  num(g[g.size(0) - 1][0]);              // n - 1: rank order kept
  auto even = hvd::allgather(torch::full({2}, float(r), torch::TensorOptions().device(gpu())));
  num(even.sum()); // 2 * n(n-1)/2
  auto b = torch::full({4}, float(r * 10), torch::TensorOptions().device(gpu()));
  hvd::broadcast(b, n - 1);
  num(b[3]); // 10 (n-1)
  // Mixed in one step: a CPU and a CUDA tensor, each on its own path.
  auto cpu = torch::full({5}, float(r + 1));
  auto dev = torch::full({5}, float(r + 1), torch::TensorOptions().device(gpu()));
  hvd::allreduce(cpu, hvd::op::sum);
  hvd::allreduce(dev, hvd::op::sum);
  num((cpu - dev.cpu()).abs().sum()); // 0
  hvd::shutdown();
  return out;
}

// In a worker: bfloat16, int16 (NCCL has no int16: reduced as int32),
// uint8 and bool CUDA tensors; one "ok"/"FAIL" line per check.
std::vector<std::string> cuda_small_types() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  auto on = [](torch::ScalarType t) { return torch::TensorOptions().dtype(t).device(gpu()); };
  std::vector<std::string> out;
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto bf = torch::full({1000}, 0.5 * (r + 1), on(torch::kBFloat16));
  hvd::allreduce(bf, hvd::op::average);
  expect(bf[999].item<float>() == 0.25f * (n + 1), "bfloat16 average");
  auto i16 = torch::full({7}, -300 * (r + 1), on(torch::kShort));
  hvd::allreduce(i16, hvd::op::sum);
  expect(i16[6].item<int64_t>() == -300 * n * (n + 1) / 2, "int16 sum");
  auto u8 = torch::full({9}, r + 250, on(torch::kByte));
  hvd::allreduce(u8, hvd::op::max);
  expect(u8[0].item<int64_t>() == 250 + n - 1, "uint8 max");
  auto any = torch::full({3}, r == n - 1, on(torch::kBool));
  hvd::allreduce(any, hvd::op::sum);
  expect(any.all().item<bool>(), "bool or");
  auto g = hvd::allgather(torch::full({r + 1, 2}, int64_t{r}, on(torch::kShort)));
  expect(g.size(0) == n * (n + 1) / 2 && g[g.size(0) - 1][1].item<int64_t>() == n - 1,
         "int16 allgather");
  auto b = torch::full({5}, float(r) + 0.5f, on(torch::kBFloat16));
  hvd::broadcast(b, n - 1);
  expect(b[4].item<float>() == float(n - 1) + 0.5f, "bfloat16 broadcast");
  auto h16 = torch::full({4}, 3 * (r + 1), on(torch::kShort));
  auto hf = torch::full({2, 3}, float(r), on(torch::kFloat)).t(); // non-contiguous
  auto th = hvd::allreduce_async(h16, hvd::op::sum, "h16");
  auto tf = hvd::allreduce_async(hf, hvd::op::max, "hf");
  hvd::synchronize(th);
  hvd::synchronize(tf);
  expect(h16[3].item<int64_t>() == 3 * n * (n + 1) / 2 && hf[2][1].item<float>() == float(n - 1),
         "allreduce_async int16 and non-contiguous");
  auto x = torch::full({n, 2}, float(r), on(torch::kFloat));
  auto y = hvd::alltoall(x);
  expect(y.is_cuda() && y[n - 1][0].item<float>() == float(n - 1), "alltoall on CUDA");
  // Issue 31: scale factors on the GPU (the multiply kernel), fused async
  // entries with factors of their own, reducescatter of CUDA tensors.
  auto sf = torch::full({1000}, float(r + 1), on(torch::kFloat));
  hvd::allreduce(sf, hvd::op::average, {.prescale_factor = 0.5, .postscale_factor = 4});
  auto si = torch::full({6}, int32_t{r + 1}, on(torch::kInt));
  hvd::allreduce(si, hvd::op::sum, {.postscale_factor = 3});
  auto sb = torch::full({8}, 1.0, on(torch::kBFloat16));
  hvd::allreduce(sb, hvd::op::sum, {.prescale_factor = 0.25});
  expect(std::abs(sf[999].item<float>() - float(n + 1)) < 1e-5 &&
           si[5].item<int64_t>() == 3 * n * (n + 1) / 2 && sb[7].item<float>() == 0.25f * n,
         "allreduce with scale factors on CUDA (float32, int32, bfloat16)");
  auto fa = torch::full({100}, float(r + 1), on(torch::kFloat));
  auto fb = torch::full({50}, float(r + 1), on(torch::kFloat));
  auto ha = hvd::allreduce_async(fa, hvd::op::sum, "fa", {.prescale_factor = 2});
  auto hb = hvd::allreduce_async(fb, hvd::op::sum, "fb", {.postscale_factor = 0.5});
  hvd::synchronize(ha);
  hvd::synchronize(hb);
  expect(fa[99].item<float>() == float(n * (n + 1)) && fb[49].item<float>() == 0.25f * n * (n + 1),
         "fused async allreduces with factors of their own on CUDA");
  auto rs = hvd::reducescatter(torch::full({2 * n + 1, 3}, float(r + 1), on(torch::kFloat)),
                               hvd::op::sum);
  expect(rs.is_cuda() && rs.size(0) == (r == 0 ? 3 : 2) &&
           rs[0][2].item<float>() == float(n * (n + 1) / 2),
         "reducescatter of a CUDA tensor");
  // SyncBatchNorm on CUDA: forward and input gradient equal one process's
  // BatchNorm over every rank's batch.
  std::vector<torch::Tensor> xs;
  for (int k = 0; k < n; ++k)
    xs.push_back(torch::arange(6 * (k + 2), torch::kFloat).reshape({k + 2, 3, 2}).mul(0.1 * (k + 1)).to(gpu()));
  int64_t off = 0;
  for (int k = 0; k < r; ++k)
    off += xs[static_cast<size_t>(k)].size(0);
  auto union_x = torch::cat(xs).requires_grad_(true);
  torch::nn::BatchNorm1d ref(3);
  ref->to(gpu());
  auto yr = ref->forward(union_x);
  yr.pow(2).sum().backward();
  hvd::SyncBatchNorm sbn(3);
  sbn->to(gpu());
  auto bx = xs[static_cast<size_t>(r)].clone().requires_grad_(true);
  auto by = sbn->forward(bx);
  by.pow(2).sum().backward();
  expect(by.is_cuda() && (by - yr.narrow(0, off, bx.size(0))).abs().max().item<float>() < 1e-4 &&
           (bx.grad() - union_x.grad().narrow(0, off, bx.size(0))).abs().max().item<float>() < 1e-4,
         "SyncBatchNorm on CUDA equals one process's BatchNorm");
  hvd::shutdown();
  return out;
}

// This rank's first row and row count of a reducescatter of `rows` rows.
std::pair<int64_t, int64_t> my_rows(int64_t rows, int r, int n) {
  int64_t first = 0;
  for (int k = 0; k < r; ++k)
    first += rows / n + (k < rows % n ? 1 : 0);
  return {first, rows / n + (r < rows % n ? 1 : 0)};
}

// In a worker: issue 59 on CUDA tensors (reducescatter with even and
// uneven rows, sync, async and grouped; alltoall with uneven splits, sync
// and async; Adasum against the same tensor on the CPU; join with CUDA
// allreduces); the backend, then one "ok"/"FAIL" line per check.
std::vector<std::string> cuda_issue59() {
  hvd::init();
  int r = hvd::rank(), n = hvd::size();
  auto on = [](torch::ScalarType t) { return torch::TensorOptions().dtype(t).device(gpu()); };
  std::vector<std::string> out{hvd::gpu_backend()};
  auto expect = [&](bool ok, const std::string& what) { out.push_back((ok ? "ok " : "FAIL ") + what); };
  auto base = [](int64_t rows, torch::ScalarType t) {
    return torch::arange(rows * 3, torch::TensorOptions().dtype(t)).reshape({rows, 3});
  };
  auto x = base(4 * n, torch::kFloat).mul(r + 1).to(gpu());
  auto want_x = base(4 * n, torch::kFloat).mul(n * (n + 1) / 2).narrow(0, 4 * r, 4);
  auto px = hvd::reducescatter(x, hvd::op::sum);
  expect(px.is_cuda() && torch::equal(px.cpu(), want_x), "reducescatter, even rows");
  auto [first, mine] = my_rows(2 * n + 1, r, n);
  auto y = base(2 * n + 1, torch::kDouble).mul(r + 1).to(gpu());
  auto py = hvd::reducescatter(y, hvd::op::average);
  auto want_y = base(2 * n + 1, torch::kDouble).mul((n + 1) / 2.0).narrow(0, first, mine);
  expect(py.is_cuda() && torch::allclose(py.cpu(), want_y), "reducescatter, uneven rows, average");
  auto z = hvd::reducescatter(torch::full({2 * n + 1, 2}, r + 1, on(torch::kShort)), hvd::op::sum);
  expect(z.scalar_type() == torch::kShort && z.size(0) == mine
           && (z == n * (n + 1) / 2).all().item<bool>(), "reducescatter of int16");
  auto hx = hvd::reducescatter_async(x, hvd::op::sum, "rs59");
  expect(torch::equal(hvd::synchronize(hx).cpu(), want_x), "reducescatter_async");
  auto g = hvd::grouped_reducescatter({x, y}, hvd::op::sum);
  expect(g.size() == 2 && torch::equal(g[0].cpu(), want_x), "grouped_reducescatter");
  // Rank r sends q + 1 rows valued 100 r + q to rank q.
  std::vector<int64_t> splits;
  std::vector<torch::Tensor> rows;
  for (int q = 0; q < n; ++q) {
    splits.push_back(q + 1);
    rows.push_back(torch::full({q + 1, 2}, float(100 * r + q)));
  }
  auto t = torch::cat(rows).to(gpu());
  std::vector<int64_t> got;
  auto a = hvd::alltoall(t, splits, &got);
  bool ok = a.is_cuda() && a.size(0) == n * (r + 1) && got.size() == static_cast<size_t>(n);
  for (int q = 0; ok && q < n; ++q)
    ok = got[static_cast<size_t>(q)] == r + 1 && (a.narrow(0, q * (r + 1), r + 1) == float(100 * q + r)).all().item<bool>();
  expect(ok, "alltoall with uneven splits");
  auto ha = hvd::alltoall_async(t, splits, "a2a59");
  std::vector<int64_t> got_async;
  expect(torch::equal(hvd::synchronize(ha, &got_async).cpu(), a.cpu()) && got_async == got,
         "alltoall_async with uneven splits");
  auto ad = torch::sin(torch::arange(1000, on(torch::kFloat)) * 0.01 * (r + 1)) + 0.1 * r;
  auto ad_cpu = ad.cpu();
  hvd::allreduce(ad, hvd::op::adasum);
  hvd::allreduce(ad_cpu, hvd::op::adasum);
  expect((ad.cpu() - ad_cpu).abs().max().item<float>() <= 1e-6f, "Adasum on CUDA equals the CPU's");
  if (n > 1 && r == n - 1) {
    expect(hvd::join() == 0, "join (joined at once)");
  } else {
    int active = n > 1 ? n - 1 : 1;
    auto js = torch::full({16}, float(r + 1), on(torch::kFloat));
    auto ja = js.clone();
    hvd::allreduce(js, hvd::op::sum);
    hvd::allreduce(ja, hvd::op::average);
    float sum = float(active * (active + 1) / 2);
    expect(js[15].item<float>() == sum && std::abs(ja[15].item<float>() - sum / float(n)) < 1e-6f,
           "CUDA allreduces with a joined rank (its zeros; the average divides by every rank)");
    expect(hvd::join() == 0, "join (joined last)");
  }
  hvd::shutdown();
  return out;
}

using hvactor::test::shard_of;

struct mlpImpl : torch::nn::Module {
  mlpImpl() : fc1(register_module("fc1", torch::nn::Linear(2, 16))),
               fc2(register_module("fc2", torch::nn::Linear(16, 2))) {
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::tanh(fc1(x)));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(mlp);

std::vector<float> flat(mlp& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m->parameters())
    ps.push_back(p.detach().to(torch::kCPU).flatten());
  auto w = torch::cat(ps);
  return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
}

// In a worker: the MLP on the GPU, seeded by rank, broadcast from 0 (its
// parameters and SGD's momentum state), then `steps` steps of SGD with
// momentum through the distributed optimizer (linear in the gradients, so
// the reference is exact up to rounding); fp16: compression::fp16.
std::vector<float> train_on_gpu(int steps, bool fp16) {
  hvd::init();
  torch::manual_seed(hvd::rank() + 1); // different on every rank until broadcast
  mlp m;
  m->to(gpu());
  hvd::broadcast_parameters(m->parameters(), 0);
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::distributed_optimizer opt(sgd, {.wire = fp16 ? hvd::compression::fp16
                                                    : hvd::compression::none});
  hvd::broadcast_optimizer_state(opt, 0);
  auto [x, y] = shard_of(hvd::rank());
  x = x.to(gpu());
  y = y.to(gpu());
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(m->forward(x), y).backward();
    opt.step();
  }
  auto out = flat(m);
  hvd::shutdown();
  return out;
}

// The reference: one process on the CPU, rank 0's initial weights, the
// whole batch.
std::vector<float> train_single_cpu(int ranks, int steps) {
  torch::manual_seed(1);
  mlp m;
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<torch::Tensor> xs, ys;
  for (int r = 0; r < ranks; ++r) {
    auto [x, y] = shard_of(r);
    xs.push_back(x);
    ys.push_back(y);
  }
  auto x = torch::cat(xs), y = torch::cat(ys);
  for (int s = 0; s < steps; ++s) {
    sgd.zero_grad();
    torch::mse_loss(m->forward(x), y).backward();
    sgd.step();
  }
  return flat(m);
}

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return INFINITY;
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// In a worker: momentum state made on each rank's GPU, broadcast from
// root 0; returns the sum of every rank's momentum buffers and their device.
std::vector<std::string> optimizer_state_on_gpu() {
  hvd::init();
  torch::manual_seed(hvd::rank() + 7);
  torch::nn::Linear l(3, 2);
  l->to(gpu());
  torch::optim::SGD sgd(l->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::mse_loss(l(torch::ones({4, 3}, gpu())), torch::zeros({4, 2}, gpu())).backward();
  sgd.step();
  hvd::broadcast_optimizer_state(sgd, 0);
  double sum = 0;
  std::string where;
  for (auto& [key, state] : sgd.state()) {
    auto& buf = static_cast<torch::optim::SGDParamState&>(*state).momentum_buffer();
    sum += buf.sum().item<double>();
    where = buf.device().str();
  }
  hvd::shutdown();
  return {std::to_string(sum), where};
}

// In a worker: the Embedding with sparse gradients of torch_optimizer_test
// on the GPU (the sparse allreduce or sparse_as_dense).
std::vector<float> sparse_on_gpu(bool as_dense) {
  hvd::init();
  hvactor::test::embed_model m;
  m.emb->to(gpu());
  m.lin->to(gpu());
  torch::optim::SGD sgd(m.params(), 0.1);
  hvd::distributed_optimizer opt(sgd, {.sparse_as_dense = as_dense});
  for (int s = 0; s < hvactor::test::embed_steps; ++s) {
    opt.zero_grad();
    m.loss({hvd::rank()}, gpu()).backward();
    opt.step();
  }
  auto out = hvactor::test::flat(m.params());
  hvd::shutdown();
  return out;
}

// In a worker: the Adasum optimizer (momentum SGD) on CUDA parameters.
std::vector<float> adasum_on_gpu() {
  hvd::init();
  torch::manual_seed(hvd::rank() + 1);
  torch::nn::Linear l(2, 2);
  l->to(gpu());
  hvd::broadcast_parameters(l->parameters(), 0);
  torch::optim::SGD sgd(l->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::distributed_optimizer opt(sgd, {.reduction = hvd::op::adasum});
  auto [x, y] = hvactor::test::shard_of(hvd::rank());
  x = x.to(gpu());
  y = y.to(gpu());
  for (int s = 0; s < hvactor::test::adasum_steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(l(x), y).backward();
    opt.step();
  }
  auto out = hvactor::test::flat(l->parameters());
  hvd::shutdown();
  return out;
}

void check_ops(const std::vector<std::vector<std::string>>& all, int n, const char* backend) {
  for (auto& out : all) {
    REQUIRE(out.size() == 10);
    CHECK(out[0] == backend);
    CHECK(std::stod(out[1]) == doctest::Approx(3000.0 * n * (n + 1) / 2));
    CHECK(std::stod(out[2]) == doctest::Approx(5 + (n - 1) / 2.0));
    CHECK(out[3].rfind("cuda", 0) == 0);
    CHECK(std::stod(out[4]) == n * (n + 1) / 2);
    double want = 0;
    for (int r = 0; r < n; ++r)
      want += 2.0 * r * (r + 1);
    CHECK(std::stod(out[5]) == want);
    CHECK(std::stod(out[6]) == n - 1);
    CHECK(std::stod(out[7]) == n * (n - 1));
    CHECK(std::stod(out[8]) == 10.0 * (n - 1));
    CHECK(std::stod(out[9]) == 0);
  }
}

} // namespace

TEST_SUITE("torch_gpu") {

TEST_CASE("gpu: CUDA tensors through NCCL at one rank: allreduce, allgather, broadcast, mixed "
          "with a CPU tensor") {
  check_ops(run_on(1, "auto", &cuda_tensor_ops), 1, "nccl");
}

TEST_CASE("gpu: CUDA tensors on two ranks sharing one GPU take the host-staged path") {
  auto all = run_on(2, "auto", &cuda_tensor_ops);
  auto backend = all[0][0] == "nccl" ? "nccl" : "host-staged";
  check_ops(all, 2, backend);
}

TEST_CASE("gpu: HVACTOR_GPU_OPERATIONS=GLOO stages through the host; NONE makes the adapter copy "
          "CUDA tensors to the CPU and back") {
  check_ops(run_on(1, "GLOO", &cuda_tensor_ops), 1, "host-staged");
  check_ops(run_on(2, "NONE", &cuda_tensor_ops), 2, "none: HVACTOR_GPU_OPERATIONS=NONE");
}

TEST_CASE("gpu: bfloat16, int16, uint8 and bool CUDA tensors on NCCL and the host-staged path") {
  for (int n : {1, 2})
    for (auto& lines : run_on(n, "auto", &cuda_small_types)) {
      REQUIRE(lines.size() == 12);
      for (auto& line : lines) {
        INFO(n << " ranks: " << line);
        CHECK(line.rfind("ok ", 0) == 0);
      }
    }
}

TEST_CASE("gpu: reducescatter, alltoall, Adasum and join on CUDA tensors at 1 and 2 ranks, on "
          "NCCL, the host-staged path and through the CPU") {
  for (int n : {1, 2})
    for (const char* ops : {"auto", "GLOO", "NONE"})
      for (auto& lines : run_on(n, ops, &cuda_issue59)) {
        REQUIRE(lines.size() >= 10); // the joined rank has one check less
        for (size_t i = 1; i < lines.size(); ++i) {
          INFO(n << " ranks, HVACTOR_GPU_OPERATIONS=" << ops << " (" << lines[0] << "): " << lines[i]);
          CHECK(lines[i].rfind("ok ", 0) == 0);
        }
      }
}

TEST_CASE("gpu: distributed_optimizer trains on the GPU (1 and 2 ranks, every device path) equal "
          "to one process on the CPU within 1e-5") {
  constexpr int steps = 10;
  for (int n : {1, 2}) {
    auto reference = train_single_cpu(n, steps);
    for (const char* ops : {"auto", "GLOO", "NONE"}) {
      auto per_rank = run_on(n, ops, &train_on_gpu, steps, false);
      for (size_t r = 0; r < per_rank.size(); ++r) {
        INFO(n << " ranks, HVACTOR_GPU_OPERATIONS=" << ops << ", rank " << r);
        CHECK(max_difference(per_rank[r], reference) < 1e-5f);
      }
    }
  }
}

TEST_CASE("gpu: sparse gradients (sparse allreduce and sparse_as_dense) and the Adasum optimizer "
          "on CUDA parameters equal their CPU references (1 and 2 ranks, every device path)") {
  for (int n : {1, 2}) {
    auto sparse_reference = hvactor::test::embedding_single(n);
    auto adasum_reference = hvactor::test::adasum_single(n);
    for (const char* ops : {"auto", "GLOO", "NONE"}) {
      for (bool as_dense : {false, true})
        for (auto& got : run_on(n, ops, &sparse_on_gpu, as_dense)) {
          INFO(n << " ranks, HVACTOR_GPU_OPERATIONS=" << ops << ", sparse_as_dense " << as_dense);
          CHECK(max_difference(got, sparse_reference) < 1e-5f);
        }
      for (auto& got : run_on(n, ops, &adasum_on_gpu)) {
        INFO(n << " ranks, HVACTOR_GPU_OPERATIONS=" << ops << ", Adasum");
        CHECK(max_difference(got, adasum_reference) < 1e-5f);
      }
    }
  }
}

TEST_CASE("gpu: fp16 compression of CUDA gradients stays close to the reference") {
  auto reference = train_single_cpu(2, 10);
  auto per_rank = run_on(2, "auto", &train_on_gpu, 10, true);
  for (auto& p : per_rank)
    CHECK(max_difference(p, reference) < 1e-2f);
  CHECK(max_difference(per_rank[0], per_rank[1]) == 0);
}

TEST_CASE("gpu: broadcast_optimizer_state puts root's momentum buffers on each rank's own GPU") {
  auto all = run_on(2, "auto", &optimizer_state_on_gpu);
  CHECK(all[0][0] == all[1][0]);
  for (auto& out : all)
    CHECK(out[1].rfind("cuda", 0) == 0);
}

} // TEST_SUITE

int main(int argc, char** argv) {
  // In a worker process this never returns: workers run this same binary.
  hvactor::runtime runtime{argc, argv, {.num_cpus = 4, .node_id = "torch-gpu-test-node"}};
  rt = &runtime;
  if (!torch::cuda::is_available()) {
    std::printf("SKIPPED: LibTorch sees no CUDA device (CUDA build of LibTorch: %s)\n",
                torch::cuda::device_count() >= 0 && torch::hasCUDA() ? "yes" : "no");
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
