// The distributed optimizer's Horovod options in real workers, each against
// one process computing the same thing from every rank's data: sparse
// gradients (sparse allreduce and sparse_as_dense), the optimizer on a
// process set, and the Adasum optimizer (op::adasum).

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

// LibTorch first: it defines glog's CHECK, which must not replace doctest's.
#include <hvactor/torch.hpp>

#include "optimizer_references.hpp"
#include "torch_shards.hpp"
#undef CHECK
#include <doctest/doctest.h>
#include <hvactor/hvactor.hpp>

#include "peer_death.hpp"

#include "test_main.hpp"

namespace hvd = hvactor::hvd;
using namespace std::chrono_literals;

namespace {

using namespace hvactor::test;

hvactor::executor make(int n) {
  return hvactor::executor{test_runtime(), hvactor::executor::create_settings({.timeout = 30s}),
                           {.num_workers = n}};
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) < tol);
  }
}

// ---- sparse ---------------------------------------------------------------

// Rank r's sparse tensor of sizes {6, 2}: rows r, r + 1 and (r + 1) again
// (an uncoalesced duplicate), values 10 r + k; rank 2 holds no entry.
torch::Tensor sparse_of(int r) {
  if (r == 2)
    return torch::sparse_coo_tensor(torch::empty({1, 0}, torch::kLong), torch::empty({0, 2}),
                                    {6, 2});
  auto idx = torch::tensor({int64_t{r}, int64_t{r + 1}, int64_t{r + 1}}).reshape({1, 3});
  auto val = torch::arange(6, torch::kFloat).reshape({3, 2}) + 10.0f * static_cast<float>(r);
  return torch::sparse_coo_tensor(idx, val, {6, 2});
}

// In a worker: the sum and average of every rank's sparse_of, as dense
// values, and whether the results came back coalesced and sparse.
std::vector<float> sparse_sums() {
  hvd::init();
  auto t = sparse_of(hvd::rank());
  auto sum = hvd::sparse_allreduce(t, hvd::op::sum, "s");
  auto h = hvd::sparse_allreduce_async(t, hvd::op::average, "a");
  auto average = hvd::synchronize(h);
  std::vector<float> out = flat({sum.to_dense(), average.to_dense()});
  out.push_back(sum.is_sparse() && sum.is_coalesced() && average.is_coalesced() ? 1.0f : 0.0f);
  hvd::shutdown();
  return out;
}

// In a worker: a rank whose dense sizes differ; what each rank caught.
std::string sparse_mismatch() {
  hvd::init();
  auto t = hvd::rank() == 1 ? torch::sparse_coo_tensor(torch::zeros({1, 1}, torch::kLong),
                                                       torch::ones({1, 2}), {7, 2})
                            : sparse_of(0);
  std::string caught;
  try {
    hvd::sparse_allreduce(t, hvd::op::sum, "emb");
  } catch (const hvactor::collective_error& e) {
    caught = e.what();
  }
  try {
    hvd::sparse_allreduce(torch::ones({2}), hvd::op::sum);
  } catch (const std::invalid_argument& e) {
    caught += std::string{" | "} + e.what();
  }
  hvd::shutdown();
  return caught;
}

std::vector<float> train_embedding(bool as_dense) {
  hvd::init();
  embed_model m; // the same seed on every rank
  torch::optim::SGD sgd(m.params(), 0.1);
  hvd::distributed_optimizer opt(sgd, {.sparse_as_dense = as_dense});
  for (int s = 0; s < embed_steps; ++s) {
    opt.zero_grad();
    m.loss({hvd::rank()}).backward();
    opt.step();
  }
  auto out = flat(m.params());
  out.push_back(m.emb->weight.grad().is_sparse() ? 1.0f : 0.0f);
  hvd::shutdown();
  return out;
}

// ---- Linear(2, 2) on shards ---------------------------------------------

constexpr int linear_steps = 8;

// One process: SGD on the concatenated shards of `ranks`, rank 0's seed.
std::vector<float> linear_single(const std::vector<int>& ranks) {
  torch::manual_seed(1);
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.05);
  std::vector<torch::Tensor> xs, ys;
  for (int r : ranks) {
    auto [x, y] = shard_of(r);
    xs.push_back(x);
    ys.push_back(y);
  }
  for (int s = 0; s < linear_steps; ++s) {
    sgd.zero_grad();
    torch::mse_loss(l(torch::cat(xs)), torch::cat(ys)).backward();
    sgd.step();
  }
  return flat(l->parameters());
}

// In a worker of 3 or 4: sets {0, 1} and (with 4) {2, 3}; each trains on
// its set with the optimizer's process_set; with 3, rank 2 is in none.
std::vector<float> train_on_set(int n, bool overlap) {
  hvd::process_set low({0, 1}), high({2, 3});
  std::vector<hvd::process_set*> sets{&low};
  if (n == 4)
    sets.push_back(&high);
  hvd::init(sets);
  torch::manual_seed(hvd::rank() + 1);
  torch::nn::Linear l(2, 2);
  hvd::broadcast_parameters(l->parameters(), 0);
  torch::optim::SGD sgd(l->parameters(), 0.05);
  auto& mine = hvd::rank() < 2 || n == 3 ? low : high; // rank 2 of 3: not a member
  hvd::distributed_optimizer opt(sgd, {.overlap = overlap, .process_set = mine});
  auto [x, y] = shard_of(hvd::rank());
  for (int s = 0; s < linear_steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(l(x), y).backward();
    opt.step();
  }
  auto out = flat(l->parameters());
  hvd::shutdown();
  return out;
}

// ---- Adasum --------------------------------------------------------------

std::vector<float> train_adasum(bool overlap) {
  hvd::init();
  torch::manual_seed(hvd::rank() + 1);
  torch::nn::Linear l(2, 2);
  hvd::broadcast_parameters(l->parameters(), 0);
  torch::optim::SGD sgd(l->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hvd::distributed_optimizer opt(sgd, {.reduction = hvd::op::adasum, .overlap = overlap});
  auto [x, y] = shard_of(hvd::rank());
  for (int s = 0; s < adasum_steps; ++s) {
    opt.zero_grad();
    torch::mse_loss(l(x), y).backward();
    opt.synchronize(); // does nothing with Adasum (Horovod's)
    opt.step();
  }
  auto out = flat(l->parameters());
  hvd::shutdown();
  return out;
}

// In a worker: what the Adasum optimizer refuses.
std::string adasum_refusals() {
  hvd::init();
  torch::nn::Linear l(2, 2);
  torch::optim::SGD sgd(l->parameters(), 0.1);
  std::string out;
  try {
    hvd::distributed_optimizer opt(sgd, {.reduction = hvd::op::adasum});
    try {
      auto skip = opt.skip_synchronize();
    } catch (const hvactor::error& e) {
      out += std::string{e.what()} + " | ";
    }
    hvd::distributed_optimizer grouped(sgd, {.reduction = hvd::op::adasum, .num_groups = 1});
  } catch (const std::invalid_argument& e) {
    out += e.what();
  }
  hvd::shutdown();
  return out;
}

// In a worker of 2: one step of the Adasum optimizer (or of the average
// with sparse gradients), then rank 1 SIGKILLs itself before its
// backward() of the second step, while rank 0 starts its deltas. Rank 0
// reports whether its step() failed and whether its parameters are those
// from before that step (the step is lost, not the parameters).
void step_when_peer_dies(std::string dir, bool adasum) {
  hvd::init();
  embed_model m;
  torch::optim::SGD sgd(m.params(), torch::optim::SGDOptions(0.1).momentum(0.9));
  hvd::distributed_optimizer opt(
    sgd, {.reduction = adasum ? hvd::op::adasum : hvd::op::average});
  std::vector<float> before;
  std::string outcome = "no error";
  try {
    for (int s = 0; s < 2; ++s) {
      before = flat(m.params());
      opt.zero_grad();
      if (s == 1 && hvd::rank() == 1) // before its deltas start: none can pair
        hvactor::test::die_now(dir);
      m.loss({hvd::rank()}).backward();
      opt.step();
    }
  } catch (const std::exception& e) {
    outcome = e.what();
  }
  bool kept = !adasum || flat(m.params()) == before;
  outcome += kept ? "\nparameters kept" : "\nparameters changed";
  hvactor::test::report_failure(dir, hvd::rank(), outcome);
}

} // namespace

TEST_SUITE("torch optimizer") {

TEST_CASE("sparse_allreduce gathers every rank's entries, duplicates and empty ranks included, "
          "into one coalesced tensor: the sum, and the sum over size() for average") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    auto ex = make(n);
    ex.start();
    auto per_rank = ex.run(&sparse_sums);
    ex.shutdown();
    auto sum = torch::zeros({6, 2});
    for (int r = 0; r < n; ++r)
      sum += sparse_of(r).to_dense();
    auto want = flat({sum, sum / n});
    want.push_back(1.0f);
    for (auto& got : per_rank)
      CHECK(got == want);
    CHECK(sum.abs().sum().item<float>() > 0); // not trivially zero
  }
}

TEST_CASE("sparse_allreduce: a rank with other dense sizes fails every rank naming both, a dense "
          "tensor is refused") {
  auto ex = make(2);
  ex.start();
  auto per_rank = ex.run(&sparse_mismatch);
  ex.shutdown();
  for (auto& caught : per_rank) {
    CHECK(caught.find("rank 1 of the process set has a sparse tensor of sizes [7, 2] but rank 0 "
                      "has [6, 2]") != std::string::npos);
    CHECK(caught.find("'emb'") != std::string::npos);
    CHECK(caught.find("the tensor is dense") != std::string::npos);
  }
}

TEST_CASE("an Embedding with sparse gradients trains with the distributed optimizer as one process "
          "on every rank's batch, through the sparse allreduce and sparse_as_dense") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    auto reference = embedding_single(n);
    auto ex = make(n);
    ex.start();
    for (bool as_dense : {false, true}) {
      CAPTURE(as_dense);
      auto per_rank = ex.run(&train_embedding, as_dense);
      for (auto& got : per_rank)
        CHECK(got == per_rank.back());
      for (auto& got : per_rank) {
        REQUIRE(got.size() == reference.size() + 1);
        CHECK(got.back() == 1.0f); // the reduced gradient is sparse again
        got.pop_back();
        check_close(got, reference, 1e-5);
      }
    }
    ex.shutdown();
    embed_model untouched;
    CHECK(flat(untouched.params()) != reference);
  }
}

TEST_CASE("distributed_optimizer on a process set averages over its members only; a rank outside "
          "every set steps on its own gradients") {
  for (int n : {4, 3}) {
    CAPTURE(n);
    auto ex = make(n);
    ex.start();
    for (bool overlap : {true, false}) {
      CAPTURE(overlap);
      auto per_rank = ex.run(&train_on_set, n, overlap);
      REQUIRE(per_rank.size() == static_cast<size_t>(n));
      auto low = linear_single({0, 1});
      check_close(per_rank[0], low, 1e-5);
      check_close(per_rank[1], low, 1e-5);
      auto high = n == 4 ? linear_single({2, 3}) : linear_single({2});
      check_close(per_rank[2], high, 1e-5);
      if (n == 4)
        check_close(per_rank[3], high, 1e-5);
      CHECK(low != high);
    }
    ex.shutdown();
  }
}

TEST_CASE("the Adasum optimizer (op::adasum) on 2 and 4 ranks: each rank's momentum SGD delta, "
          "combined by Adasum's tree, equals one process doing the same") {
  for (int n : {2, 4}) {
    CAPTURE(n);
    auto reference = adasum_single(n);
    auto ex = make(n);
    ex.start();
    for (bool overlap : {true, false}) {
      CAPTURE(overlap);
      auto per_rank = ex.run(&train_adasum, overlap);
      for (auto& got : per_rank) {
        CHECK(got == per_rank[0]);
        check_close(got, reference, 1e-5);
      }
    }
    ex.shutdown();
  }
}

TEST_CASE("the Adasum optimizer refuses what Horovod's refuses: 3 ranks, skip_synchronize, groups") {
  auto ex = make(3);
  ex.start();
  for (auto& caught : ex.run(&adasum_refusals))
    CHECK(caught.find("Running Adasum with non-power of 2 ranks is not supported yet") !=
          std::string::npos);
  ex.shutdown();
  auto two = make(2);
  two.start();
  for (auto& caught : two.run(&adasum_refusals)) {
    CHECK(caught.find("Skipping synchronization is not supported when using Adasum optimizer") !=
          std::string::npos);
    CHECK(caught.find("groups and num_groups do not apply") != std::string::npos);
  }
  two.shutdown();
}

TEST_CASE("a rank SIGKILLed inside a step: the survivor's Adasum step fails within 5 s and leaves "
          "its parameters as they were, and the sparse allreduce fails the survivor too") {
  for (bool adasum : {true, false}) {
    CAPTURE(adasum);
    auto dir = std::filesystem::temp_directory_path() /
               ("hvactor-optimizer-death-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    hvactor::executor ex{test_runtime(),
                         hvactor::executor::create_settings({.timeout = 20s}),
                         {.num_workers = 2}};
    ex.start();
    CHECK_THROWS_AS(ex.run(&step_when_peer_dies, dir.string(), adasum), hvactor::worker_error);
    hvactor::test::check_survivors_failed(dir, {0}, 5s);
    std::ifstream in(dir / "rank-0");
    std::string report((std::istreambuf_iterator<char>(in)), {});
    CHECK(report.find("parameters kept") != std::string::npos);
    ex.shutdown();
    std::filesystem::remove_all(dir);
  }
}

} // TEST_SUITE
