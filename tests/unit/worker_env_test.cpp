// The env table of DESIGN.md ("Worker env"), one case per row.

#include "actors/node/worker_env.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

using hvactor::worker_env_spec;
using hvactor::worker_envs;
using hvactor::proto::env_list;
using namespace std::chrono_literals;

namespace {

/// 2 nodes x 2 workers: ranks 0, 1 on node-a, ranks 2, 3 on node-b.
worker_env_spec two_by_two() {
  worker_env_spec spec;
  spec.node_of_rank = {"node-a", "node-a", "node-b", "node-b"};
  spec.rendezvous_host = "10.0.0.1";
  spec.rendezvous_port = 4711;
  spec.job_id = "job-1";
  spec.timeout = 30s;
  return spec;
}

/// 3 nodes, uneven: ranks 0-2 on a, 3 on b, 4-5 on c.
worker_env_spec three_uneven() {
  auto spec = two_by_two();
  spec.node_of_rank = {"a", "a", "a", "b", "c", "c"};
  return spec;
}

/// How often `key` occurs in `env`.
long count_of(const env_list& env, const std::string& key) {
  return std::count_if(env.entries.begin(), env.entries.end(),
                       [&](const auto& kv) { return kv.first == key; });
}

/// The value of `key` in `env` (it must occur exactly once).
std::string value_of(const env_list& env, const std::string& key) {
  REQUIRE_MESSAGE(count_of(env, key) == 1, key);
  for (auto& [k, v] : env.entries)
    if (k == key)
      return v;
  return {};
}

/// `key` of every rank, in rank order.
std::vector<std::string> column(const std::vector<env_list>& envs, const std::string& key) {
  std::vector<std::string> out;
  for (auto& env : envs)
    out.push_back(value_of(env, key));
  return out;
}

std::vector<std::string> keys_of(const env_list& env) {
  std::vector<std::string> out;
  for (auto& [k, v] : env.entries)
    out.push_back(k);
  return out;
}

using strings = std::vector<std::string>;

} // namespace

TEST_SUITE("worker_env") {

TEST_CASE("every rank gets the Horovod variables in the contract's order") {
  auto envs = worker_envs(two_by_two());
  REQUIRE(envs.size() == 4);
  CHECK(keys_of(envs[3])
        == strings{"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                   "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME",
                   "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS",
                   "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT",
                   "HVACTOR_RENDEZVOUS_SCOPE", "HOROVOD_GLOO_TIMEOUT_SECONDS"});
}

TEST_CASE("HOROVOD_RANK and HOROVOD_SIZE: the world rank and the number of ranks") {
  auto envs = worker_envs(two_by_two());
  CHECK(column(envs, "HOROVOD_RANK") == strings{"0", "1", "2", "3"});
  CHECK(column(envs, "HOROVOD_SIZE") == strings{"4", "4", "4", "4"});
}

TEST_CASE("HOROVOD_LOCAL_RANK and _LOCAL_SIZE: index among the node's workers in rank order") {
  auto envs = worker_envs(two_by_two());
  CHECK(column(envs, "HOROVOD_LOCAL_RANK") == strings{"0", "1", "0", "1"});
  CHECK(column(envs, "HOROVOD_LOCAL_SIZE") == strings{"2", "2", "2", "2"});
  auto uneven = worker_envs(three_uneven());
  CHECK(column(uneven, "HOROVOD_LOCAL_RANK") == strings{"0", "1", "2", "0", "0", "1"});
  CHECK(column(uneven, "HOROVOD_LOCAL_SIZE") == strings{"3", "3", "3", "1", "2", "2"});
  // Interleaved nodes: a node's workers still count in rank order.
  auto spec = two_by_two();
  spec.node_of_rank = {"node-a", "node-b", "node-a", "node-b"};
  CHECK(column(worker_envs(spec), "HOROVOD_LOCAL_RANK") == strings{"0", "0", "1", "1"});
}

TEST_CASE("HOROVOD_CROSS_RANK and _CROSS_SIZE follow Horovod's finalize_registration") {
  auto envs = worker_envs(two_by_two());
  CHECK(column(envs, "HOROVOD_CROSS_RANK") == strings{"0", "0", "1", "1"});
  CHECK(column(envs, "HOROVOD_CROSS_SIZE") == strings{"2", "2", "2", "2"});
  // Local rank 0 exists on a, b, c; local rank 1 on a, c; local rank 2 on a.
  auto uneven = worker_envs(three_uneven());
  CHECK(column(uneven, "HOROVOD_CROSS_RANK") == strings{"0", "0", "0", "1", "2", "1"});
  CHECK(column(uneven, "HOROVOD_CROSS_SIZE") == strings{"3", "2", "1", "3", "3", "2"});
}

TEST_CASE("HOROVOD_HOSTNAME is the rank's node id") {
  CHECK(column(worker_envs(two_by_two()), "HOROVOD_HOSTNAME")
        == strings{"node-a", "node-a", "node-b", "node-b"});
}

TEST_CASE("HOROVOD_CONTROLLER and HOROVOD_CPU_OPERATIONS are gloo") {
  auto envs = worker_envs(three_uneven());
  CHECK(column(envs, "HOROVOD_CONTROLLER") == strings(6, "gloo"));
  CHECK(column(envs, "HOROVOD_CPU_OPERATIONS") == strings(6, "gloo"));
}

TEST_CASE("HOROVOD_GLOO_RENDEZVOUS_ADDR and _PORT say where the rendezvous store answers") {
  auto envs = worker_envs(two_by_two());
  CHECK(column(envs, "HOROVOD_GLOO_RENDEZVOUS_ADDR") == strings(4, "10.0.0.1"));
  CHECK(column(envs, "HOROVOD_GLOO_RENDEZVOUS_PORT") == strings(4, "4711"));
}

TEST_CASE("HVACTOR_RENDEZVOUS_SCOPE is <job>/<generation>") {
  auto spec = two_by_two();
  CHECK(column(worker_envs(spec), "HVACTOR_RENDEZVOUS_SCOPE") == strings(4, "job-1/0"));
  spec.generation = 3;
  CHECK(column(worker_envs(spec), "HVACTOR_RENDEZVOUS_SCOPE") == strings(4, "job-1/3"));
}

TEST_CASE("HOROVOD_GLOO_TIMEOUT_SECONDS is the job timeout in whole seconds, at least 1") {
  auto spec = two_by_two();
  CHECK(value_of(worker_envs(spec)[0], "HOROVOD_GLOO_TIMEOUT_SECONDS") == "30");
  spec.timeout = 2500ms;
  CHECK(value_of(worker_envs(spec)[0], "HOROVOD_GLOO_TIMEOUT_SECONDS") == "2");
  spec.timeout = 200ms;
  CHECK(value_of(worker_envs(spec)[0], "HOROVOD_GLOO_TIMEOUT_SECONDS") == "1");
}

TEST_CASE("HOROVOD_GLOO_IFACE and NCCL_SOCKET_IFNAME appear only when NICs are known") {
  auto spec = two_by_two();
  for (auto& env : worker_envs(spec)) {
    CHECK(count_of(env, "HOROVOD_GLOO_IFACE") == 0);
    CHECK(count_of(env, "NCCL_SOCKET_IFNAME") == 0);
  }
  // As Horovod's gloo_run: Gloo takes the first NIC, NCCL all of them.
  spec.nics = {"eth0", "ib0"};
  auto envs = worker_envs(spec);
  CHECK(column(envs, "HOROVOD_GLOO_IFACE") == strings(4, "eth0"));
  CHECK(column(envs, "NCCL_SOCKET_IFNAME") == strings(4, "eth0,ib0"));
}

TEST_CASE("HOROVOD_ELASTIC=1 marks an elastic job and is absent otherwise") {
  auto spec = two_by_two();
  for (auto& env : worker_envs(spec))
    CHECK(count_of(env, "HOROVOD_ELASTIC") == 0);
  spec.elastic = true;
  CHECK(column(worker_envs(spec), "HOROVOD_ELASTIC") == strings(4, "1"));
}

TEST_CASE("CUDA_VISIBLE_DEVICES of a GPU job is the node's union in local-rank order") {
  auto spec = two_by_two();
  spec.gpu_ids_of_rank = {{2}, {0}, {1, 3}, {0, 2}};
  auto envs = worker_envs(spec);
  CHECK(column(envs, "CUDA_VISIBLE_DEVICES") == strings{"2,0", "2,0", "1,3,0,2", "1,3,0,2"});
  // A CPU job (no ids, or only empty ones) gets none.
  spec.gpu_ids_of_rank = {};
  for (auto& env : worker_envs(spec))
    CHECK(count_of(env, "CUDA_VISIBLE_DEVICES") == 0);
  spec.gpu_ids_of_rank = {{}, {}, {}, {}};
  for (auto& env : worker_envs(spec))
    CHECK(count_of(env, "CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("GPU ids for a different number of ranks are refused, naming both counts") {
  auto spec = two_by_two();
  spec.gpu_ids_of_rank = {{0}, {1}};
  CHECK_THROWS_WITH_AS(worker_envs(spec),
                       "worker env: GPU ids given for 2 ranks, but the job has 4 ranks",
                       std::invalid_argument);
}

TEST_CASE("cuda_visible_devices joins ids with commas, no spaces, each id once") {
  CHECK(hvactor::cuda_visible_devices({}).empty());
  CHECK(hvactor::cuda_visible_devices({3}) == "3");
  CHECK(hvactor::cuda_visible_devices({3, 1, 3, 0}) == "3,1,0");
}

TEST_CASE("extra_env_vars come last, after NICs, elastic and CUDA_VISIBLE_DEVICES") {
  auto spec = two_by_two();
  spec.nics = {"eth0"};
  spec.elastic = true;
  spec.gpu_ids_of_rank = {{0}, {1}, {0}, {1}};
  spec.extra_env_vars = {{"B_VAR", "2"}, {"A_VAR", "1"}};
  auto keys = keys_of(worker_envs(spec)[1]);
  REQUIRE(keys.size() == 19);
  CHECK(strings(keys.begin() + 13, keys.end())
        == strings{"HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME", "HOROVOD_ELASTIC",
                   "CUDA_VISIBLE_DEVICES", "A_VAR", "B_VAR"});
}

TEST_CASE("an extra_env_var replaces a contract variable of the same name") {
  auto spec = two_by_two();
  spec.gpu_ids_of_rank = {{0}, {1}, {0}, {1}};
  spec.extra_env_vars = {{"HOROVOD_CONTROLLER", "mpi"}, {"CUDA_VISIBLE_DEVICES", "7"}};
  for (auto& env : worker_envs(spec)) {
    CHECK(value_of(env, "HOROVOD_CONTROLLER") == "mpi");
    CHECK(value_of(env, "CUDA_VISIBLE_DEVICES") == "7");
    CHECK(env.entries.back().first == "HOROVOD_CONTROLLER");
  }
}

TEST_CASE("no ranks, no envs") {
  worker_env_spec spec;
  CHECK(worker_envs(spec).empty());
}

TEST_CASE("the bootstrap env tells a worker process where its coordinator is") {
  auto env = hvactor::worker_bootstrap_env("10.0.0.1:5000", "job-1", 2500ms);
  CHECK(env.entries
        == std::vector<std::pair<std::string, std::string>>{
          {"HVACTOR_WORKER_COORDINATOR", "10.0.0.1:5000"},
          {"HVACTOR_WORKER_JOB", "job-1"},
          {"HVACTOR_WORKER_TIMEOUT_MS", "2500"}});
}

TEST_CASE("a job's shared-memory segment is planned from its settings; what it does not say stays "
          "the node's") {
  hvactor::proto::spawn_request req;
  hvactor::plan_shm({{"OTHER", "1"}}, req);
  CHECK(req.shm == -1);
  CHECK(req.shm_slot_bytes == 0);
  hvactor::plan_shm({{"HVACTOR_SHM", "0"}, {"HOROVOD_FUSION_THRESHOLD", "1048576"}}, req);
  CHECK(req.shm == 0);
  CHECK(req.shm_slot_bytes == 1048576);
  hvactor::plan_shm({{"HVACTOR_SHM", "1"}}, req);
  CHECK(req.shm == 1);
  // Clamped to the segment's bounds; not a number is the smallest slot.
  CHECK(hvactor::shm_slot_bytes_for("1") == 64u << 10);
  CHECK(hvactor::shm_slot_bytes_for("999999999999999") == 8u << 20);
  CHECK(hvactor::shm_slot_bytes_for("junk") == 64u << 10);
  CHECK(hvactor::shm_slot_bytes_for("") == 64u << 10);
}

} // TEST_SUITE
