// hvactor errors through caf::error and back: no kind may vanish on the way
// (CAF reads code 0 as "no error").

#include <hvactor/errors.hpp>

#include <set>
#include <stdexcept>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/sec.hpp>
#include <doctest/doctest.h>

#include "base/internal/caf_error.hpp"

namespace {

using hvactor::error_kind;

/// What throw_caf_error raised for `err`: its class, message and rank.
struct raised {
  std::string name = "nothing";
  std::string message;
  int rank = -1;
};

raised thrown(const caf::error& err) {
  raised out;
  try {
    hvactor::throw_caf_error(err, "ctx");
  } catch (const hvactor::worker_error& e) {
    out = {"worker_error", e.what(), e.rank()};
  } catch (const hvactor::collective_error& e) {
    out = {"collective_error", e.what(), e.peer()};
  } catch (const hvactor::placement_timeout& e) {
    out = {"placement_timeout", e.what()};
  } catch (const hvactor::rendezvous_timeout& e) {
    out = {"rendezvous_timeout", e.what()};
  } catch (const hvactor::node_lost& e) {
    out = {"node_lost", e.what()};
  } catch (const hvactor::not_started& e) {
    out = {"not_started", e.what()};
  } catch (const hvactor::elastic_timeout& e) {
    out = {"elastic_timeout", e.what()};
  } catch (const hvactor::reset_limit_exceeded& e) {
    out = {"reset_limit_exceeded", e.what()};
  } catch (const hvactor::error& e) {
    out = {"error", e.what()};
  } catch (const std::invalid_argument& e) {
    out = {"invalid_argument", e.what()};
  }
  return out;
}

} // namespace

TEST_SUITE("errors") {

TEST_CASE("no error kind is 0, which CAF reads as success, and every kind is distinct") {
  std::set<int> codes;
  for (auto kind : hvactor::all_error_kinds) {
    CAPTURE(hvactor::to_string(kind));
    CHECK(static_cast<int>(kind) != 0);
    codes.insert(static_cast<int>(kind));
  }
  CHECK(codes.size() == std::size(hvactor::all_error_kinds));
}

TEST_CASE("every kind travels through caf::error as a non-empty error and comes back as its "
          "exception class with its message and rank") {
  for (auto kind : hvactor::all_error_kinds) {
    auto name = std::string{hvactor::to_string(kind)};
    CAPTURE(name);
    auto err = hvactor::make_error(kind, "what happened on " + name, 3);
    REQUIRE(static_cast<bool>(err)); // a vanished error reads as success
    CHECK(err.category() == hvactor::error_category);
    CHECK(hvactor::describe(err) == "what happened on " + name);
    auto got = thrown(err);
    CHECK(got.name == name);
    CHECK(got.message == "what happened on " + name);
    if (kind == error_kind::worker_error || kind == error_kind::collective_error)
      CHECK(got.rank == 3);
  }
}

TEST_CASE("a copied and moved error keeps its kind and message") {
  auto err = hvactor::make_error(error_kind::node_lost, "node 'b' left");
  caf::error copy = err;
  caf::error moved = std::move(copy);
  CHECK(static_cast<bool>(moved));
  CHECK(thrown(moved).name == "node_lost");
}

TEST_CASE("the actor system renders hvactor errors with their kind and message") {
  caf::actor_system_config cfg;
  hvactor::register_error_category(cfg);
  caf::actor_system sys{cfg};
  auto text = sys.render(hvactor::make_error(error_kind::rendezvous_timeout, "rank 1 never came"));
  CHECK(text.find("rendezvous_timeout") != std::string::npos);
  CHECK(text.find("rank 1 never came") != std::string::npos);
}

TEST_CASE("CAF's own errors become hvactor::error naming the context") {
  auto timeout = thrown(caf::make_error(caf::sec::request_timeout));
  CHECK(timeout.name == "error");
  CHECK(timeout.message == "ctx: no answer in time (request_timeout)");
  auto down = thrown(caf::make_error(caf::sec::request_receiver_down));
  CHECK(down.name == "error");
  CHECK(down.message.rfind("ctx: ", 0) == 0);
  CHECK(down.message.find("request_receiver_down") != std::string::npos);
}

TEST_CASE("an empty error is reported as an internal bug, never as success") {
  auto got = thrown(caf::error{});
  CHECK(got.name == "error");
  CHECK(got.message.find("ctx") != std::string::npos);
  CHECK(got.message.find("internal bug") != std::string::npos);
}

} // TEST_SUITE
