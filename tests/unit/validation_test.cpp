// executor_options validation (API.md's "Validation" table) and the mapping
// of error kinds back to hvactor's exception classes.

#include <hvactor/errors.hpp>
#include <hvactor/settings.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

using hvactor::error_kind;
using hvactor::executor_options;
using hvactor::throw_error;
using hvactor::validate;

namespace {

/// The message validate() rejects `opts` with, or "<accepted>".
std::string rejection(const executor_options& opts) {
  try {
    validate(opts);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "<accepted>";
}

/// Checks that `opts` is rejected with a message starting with `expected`.
void check_rejected(const executor_options& opts, const std::string& expected) {
  auto message = rejection(opts);
  INFO("full message: ", message);
  CHECK(message.substr(0, expected.size()) == expected);
}

void check_accepted(const executor_options& opts) {
  CHECK(rejection(opts) == "<accepted>");
}

/// Calls throw_error(kind, ...) and checks the dynamic type, text and base
/// classes of what it throws.
template <class Expected>
void check_thrown_as(error_kind kind) {
  CAPTURE(static_cast<int>(kind));
  try {
    throw_error(kind, "rank 2 on node-b: boom", 2);
  } catch (const std::exception& e) {
    CHECK(typeid(e) == typeid(Expected));
    CHECK(std::string{e.what()} == "rank 2 on node-b: boom");
    if constexpr (!std::is_same_v<Expected, std::invalid_argument>) {
      CHECK(dynamic_cast<const hvactor::error*>(&e) != nullptr);
      CHECK(dynamic_cast<const std::runtime_error*>(&e) != nullptr);
    }
    return;
  }
  FAIL("throw_error returned");
}

} // namespace

TEST_SUITE("validation") {

TEST_CASE("a job with neither num_workers nor num_hosts is rejected") {
  check_rejected({}, "One of num_workers or num_hosts must be set.");
  check_rejected({.cpus_per_worker = 2}, "One of num_workers or num_hosts must be set.");
}

TEST_CASE("a job with both num_workers and num_hosts is rejected") {
  check_rejected({.num_workers = 2, .num_hosts = 1, .num_workers_per_host = 2},
                 "Only one of num_workers and num_hosts must be set.");
  check_rejected({.num_workers = 2, .num_hosts = 1},
                 "Only one of num_workers and num_hosts must be set.");
}

TEST_CASE("num_hosts without num_workers_per_host is rejected") {
  check_rejected({.num_hosts = 2}, "num_workers_per_host must be set with num_hosts.");
}

TEST_CASE("a zero count is rejected naming the field and the value") {
  check_rejected({.num_workers = 0}, "num_workers must be >= 1: Got 0.");
  check_rejected({.num_hosts = 0, .num_workers_per_host = 2}, "num_hosts must be >= 1: Got 0.");
  check_rejected({.num_hosts = 2, .num_workers_per_host = 0},
                 "num_workers_per_host must be >= 1: Got 0.");
  check_rejected({.min_workers = 0}, "min_workers must be >= 1: Got 0.");
  check_rejected({.min_workers = 1, .max_workers = 0}, "max_workers must be >= 1: Got 0.");
}

TEST_CASE("a negative count is rejected with the negative value in the message") {
  check_rejected({.num_workers = -3}, "num_workers must be >= 1: Got -3.");
  check_rejected({.num_hosts = -1, .num_workers_per_host = 2}, "num_hosts must be >= 1: Got -1.");
  check_rejected({.num_hosts = 2, .num_workers_per_host = -4},
                 "num_workers_per_host must be >= 1: Got -4.");
  check_rejected({.min_workers = -2}, "min_workers must be >= 1: Got -2.");
  check_rejected({.min_workers = 1, .max_workers = -1}, "max_workers must be >= 1: Got -1.");
}

TEST_CASE("cpus_per_worker below 1 is rejected") {
  check_rejected({.num_workers = 1, .cpus_per_worker = 0}, "cpus_per_worker must be >= 1: Got 0.");
  check_rejected({.num_workers = 1, .cpus_per_worker = -1},
                 "cpus_per_worker must be >= 1: Got -1.");
}

TEST_CASE("gpus_per_worker without use_gpu is rejected") {
  check_rejected({.num_workers = 1, .gpus_per_worker = 1},
                 "gpus_per_worker is set, but use_gpu is False.");
  // Even a value that would be invalid anyway names the missing use_gpu.
  check_rejected({.num_workers = 1, .gpus_per_worker = 0},
                 "gpus_per_worker is set, but use_gpu is False.");
}

TEST_CASE("gpus_per_worker below 1 with use_gpu is rejected") {
  check_rejected({.num_workers = 1, .use_gpu = true, .gpus_per_worker = 0},
                 "gpus_per_worker must be >= 1: Got 0.");
  check_rejected({.num_workers = 1, .use_gpu = true, .gpus_per_worker = -2},
                 "gpus_per_worker must be >= 1: Got -2.");
}

TEST_CASE("min_workers together with num_workers is rejected") {
  check_rejected({.num_workers = 2, .min_workers = 1}, "Both min_workers and num_workers provided.");
  check_rejected({.num_workers = 2, .min_workers = 1, .max_workers = 4},
                 "Both min_workers and num_workers provided.");
}

TEST_CASE("max_workers without a positive min_workers is rejected") {
  check_rejected({.max_workers = 4}, "max_workers provided without any positive min_workers.");
  check_rejected({.min_workers = 0, .max_workers = 4},
                 "max_workers provided without any positive min_workers.");
  check_rejected({.min_workers = -1, .max_workers = 4},
                 "max_workers provided without any positive min_workers.");
}

TEST_CASE("max_workers below min_workers is rejected") {
  check_rejected({.min_workers = 4, .max_workers = 2},
                 "max_workers must be >= min_workers: Got 2 < 4.");
}

TEST_CASE("API.md's elastic executor_options compile in its order and are accepted") {
  using namespace std::chrono_literals;
  check_accepted({.min_workers = 2,
                  .max_workers = 8,
                  .cpus_per_worker = 1,
                  .reset_limit = 10,
                  .cooldown_range = std::pair{1, 60},
                  .elastic_timeout = 600s,
                  .discovery = {}});
  check_accepted({.min_workers = 1, .discovery = hvactor::discovery::function([] {
                    return std::vector<hvactor::host_slots>{{"n1", 2}};
                  })});
}

TEST_CASE("num_hosts cannot be combined with min_workers") {
  check_rejected({.num_hosts = 2, .num_workers_per_host = 1, .min_workers = 1},
                 "num_hosts cannot be combined with min_workers.");
}

TEST_CASE("elastic_timeout and discovery_period must be positive") {
  check_rejected({.min_workers = 1, .elastic_timeout = std::chrono::seconds(0)},
                 "elastic_timeout must be positive: Got 0 s.");
  check_rejected({.min_workers = 1, .discovery_period = std::chrono::milliseconds(-5)},
                 "discovery_period must be positive: Got -5 ms.");
}

TEST_CASE("a negative reset_limit is rejected and zero is accepted") {
  check_rejected({.min_workers = 1, .reset_limit = -1}, "reset_limit must be >= 0: Got -1.");
  check_accepted({.min_workers = 1, .reset_limit = 0});
}

TEST_CASE("cooldown_range must satisfy 1 <= lower <= upper <= 3600") {
  auto with_cooldown = [](int lower, int upper) {
    return executor_options{.min_workers = 1, .cooldown_range = std::pair{lower, upper}};
  };
  check_accepted(with_cooldown(1, 1));
  check_accepted(with_cooldown(1, 3600));
  check_accepted(with_cooldown(3600, 3600));
  check_rejected(with_cooldown(0, 10), "cooldown_range must satisfy");
  check_rejected(with_cooldown(-5, 10), "cooldown_range must satisfy");
  check_rejected(with_cooldown(1, 3601), "cooldown_range must satisfy");
  check_rejected(with_cooldown(20, 10), "cooldown_range must satisfy");
  CHECK(rejection(with_cooldown(20, 10)).find("(20, 10)") != std::string::npos);
}

TEST_CASE("valid static jobs are accepted") {
  check_accepted({.num_workers = 1});
  check_accepted({.num_workers = 64, .cpus_per_worker = 4});
  check_accepted({.num_hosts = 2, .num_workers_per_host = 3});
  check_accepted({.num_workers = 2, .extra_env_vars = {{"OMP_NUM_THREADS", "1"}}});
}

TEST_CASE("use_gpu is accepted with and without gpus_per_worker") {
  check_accepted({.num_workers = 2, .use_gpu = true});
  check_accepted({.num_workers = 2, .use_gpu = true, .gpus_per_worker = 1});
  check_accepted({.num_hosts = 1, .num_workers_per_host = 2, .use_gpu = true, .gpus_per_worker = 2});
}

TEST_CASE("valid elastic jobs are accepted without num_workers or num_hosts") {
  check_accepted({.min_workers = 1});
  check_accepted({.min_workers = 1, .max_workers = 4});
  check_accepted({.min_workers = 2, .max_workers = 2});
  check_accepted({.min_workers = 1,
                  .max_workers = 4,
                  .reset_limit = 3,
                  .cooldown_range = std::pair{1, 10},
                  .elastic_timeout = std::chrono::seconds(60)});
}

TEST_CASE("every error class derives from hvactor::error and std::runtime_error") {
  static_assert(std::is_base_of_v<std::runtime_error, hvactor::error>);
  static_assert(std::is_base_of_v<hvactor::error, hvactor::placement_timeout>);
  static_assert(std::is_base_of_v<hvactor::error, hvactor::rendezvous_timeout>);
  static_assert(std::is_base_of_v<hvactor::error, hvactor::worker_error>);
  static_assert(std::is_base_of_v<hvactor::error, hvactor::node_lost>);
  static_assert(std::is_base_of_v<hvactor::error, hvactor::not_started>);
  CHECK(std::string{hvactor::node_lost{"node-b left"}.what()} == "node-b left");
}

TEST_CASE("throw_error throws the class of every error kind with the message") {
  check_thrown_as<hvactor::error>(error_kind::generic);
  check_thrown_as<hvactor::placement_timeout>(error_kind::placement_timeout);
  check_thrown_as<hvactor::rendezvous_timeout>(error_kind::rendezvous_timeout);
  check_thrown_as<hvactor::worker_error>(error_kind::worker_error);
  check_thrown_as<hvactor::node_lost>(error_kind::node_lost);
  check_thrown_as<hvactor::not_started>(error_kind::not_started);
}

TEST_CASE("throw_error maps invalid_argument to std::invalid_argument") {
  check_thrown_as<std::invalid_argument>(error_kind::invalid_argument);
  CHECK_THROWS_AS(throw_error(error_kind::invalid_argument, "bad"), std::logic_error);
}

TEST_CASE("throw_error falls back to hvactor::error for an unknown kind") {
  check_thrown_as<hvactor::error>(static_cast<error_kind>(42));
}

TEST_CASE("a worker_error from throw_error carries the failing rank") {
  try {
    throw_error(error_kind::worker_error, "rank 3 died", 3);
    FAIL("throw_error returned");
  } catch (const hvactor::worker_error& e) {
    CHECK(e.rank() == 3);
  }
  try {
    throw_error(error_kind::worker_error, "some rank died");
    FAIL("throw_error returned");
  } catch (const hvactor::worker_error& e) {
    CHECK(e.rank() == -1);
  }
  CHECK(hvactor::worker_error{"direct", 7}.rank() == 7);
  CHECK(hvactor::worker_error{"direct"}.rank() == -1);
}

} // TEST_SUITE

TEST_SUITE("gpu ids") {
TEST_CASE("--gpu-ids parses comma-separated ids and refuses anything else, naming the option") {
  CHECK(hvactor::parse_gpu_ids("0,2,3") == std::vector<int>{0, 2, 3});
  CHECK(hvactor::parse_gpu_ids("").empty());
  CHECK(hvactor::parse_gpu_ids("1,,2") == std::vector<int>{1, 2});
  for (auto bad : {"a", "1,x", "-1", "1.5", "2,3b"})
    CHECK_THROWS_WITH_AS(hvactor::parse_gpu_ids(bad),
                         doctest::Contains("--gpu-ids must be comma-separated"),
                         std::invalid_argument);
}
} // TEST_SUITE

TEST_CASE("num_hosts * num_workers_per_host must fit an int") {
  check_rejected({.num_hosts = 65536, .num_workers_per_host = 65536},
                 "num_hosts * num_workers_per_host must be <= 2147483647: Got 65536 * 65536.");
  check_accepted({.num_hosts = 2, .num_workers_per_host = 1073741823});
}

TEST_CASE("extra_env_vars names must be non-empty without '=' or NUL; values without NUL") {
  auto with_env = [](std::string name, std::string value) {
    executor_options o{.num_workers = 1};
    o.extra_env_vars[std::move(name)] = std::move(value);
    return o;
  };
  check_rejected(with_env("", "x"), "extra_env_vars names must be non-empty and contain neither "
                                    "'=' nor NUL: Got ''.");
  check_rejected(with_env("A=B", "x"), "extra_env_vars names must be non-empty and contain "
                                       "neither '=' nor NUL: Got 'A=B'.");
  check_rejected(with_env(std::string{"A\0B", 3}, "x"),
                 "extra_env_vars names must be non-empty and contain neither '=' nor NUL: Got "
                 "'A\\x00B'.");
  check_rejected(with_env("A", std::string{"x\0y", 3}),
                 "extra_env_vars values must not contain NUL: Got 'A' = 'x\\x00y'.");
  check_accepted(with_env("MY_VAR", "a=b c"));
}

TEST_CASE("settings: timeouts must be positive; milliseconds::max() is accepted as no bound") {
  auto rejection_of = [](hvactor::settings s) -> std::string {
    try {
      validate(s);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "<accepted>";
  };
  using ms = std::chrono::milliseconds;
  CHECK(rejection_of({.timeout = ms{-5}}) == "timeout must be > 0 ms: Got -5 ms.");
  CHECK(rejection_of({.placement_timeout = ms{0}}) == "placement_timeout must be > 0 ms: Got 0 ms.");
  CHECK(rejection_of({.call_timeout = ms{-1}}) == "call_timeout must be > 0 ms: Got -1 ms.");
  CHECK(rejection_of({.stderr_tail_lines = -1}) == "stderr_tail_lines must be >= 0: Got -1.");
  CHECK(rejection_of({.timeout = ms::max(), .placement_timeout = ms::max(),
                      .call_timeout = ms::max()}) == "<accepted>");
}
