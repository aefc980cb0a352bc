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

#include "internal/caf_error.hpp"

namespace {

using hvactor::error_kind;

/// The exception class throw_caf_error raises for `err`, as a name.
std::string thrown_class(const caf::error& err, std::string* message = nullptr, int* rank = nullptr) {
  try {
    hvactor::throw_caf_error(err, "ctx");
  } catch (const hvactor::placement_timeout& e) {
    if (message)
      *message = e.what();
    return "placement_timeout";
  } catch (const hvactor::rendezvous_timeout& e) {
    if (message)
      *message = e.what();
    return "rendezvous_timeout";
  } catch (const hvactor::worker_error& e) {
    if (message)
      *message = e.what();
    if (rank)
      *rank = e.rank();
    return "worker_error";
  } catch (const hvactor::node_lost& e) {
    if (message)
      *message = e.what();
    return "node_lost";
  } catch (const hvactor::not_started& e) {
    if (message)
      *message = e.what();
    return "not_started";
  } catch (const hvactor::collective_error& e) {
    if (message)
      *message = e.what();
    if (rank)
      *rank = e.peer();
    return "collective_error";
  } catch (const hvactor::error& e) {
    if (message)
      *message = e.what();
    return "error";
  } catch (const std::invalid_argument& e) {
    if (message)
      *message = e.what();
    return "invalid_argument";
  }
  return "nothing";
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
    std::string message;
    int rank = -1;
    CHECK(thrown_class(err, &message, &rank) == name);
    CHECK(message == "what happened on " + name);
    if (kind == error_kind::worker_error || kind == error_kind::collective_error)
      CHECK(rank == 3);
  }
}

TEST_CASE("a copied and moved error keeps its kind and message") {
  auto err = hvactor::make_error(error_kind::node_lost, "node 'b' left");
  caf::error copy = err;
  caf::error moved = std::move(copy);
  CHECK(static_cast<bool>(moved));
  CHECK(thrown_class(moved) == "node_lost");
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
  std::string message;
  CHECK(thrown_class(caf::make_error(caf::sec::request_timeout), &message) == "error");
  CHECK(message == "ctx: no answer in time (request_timeout)");
  CHECK(thrown_class(caf::make_error(caf::sec::request_receiver_down), &message) == "error");
  CHECK(message.rfind("ctx: ", 0) == 0);
  CHECK(message.find("request_receiver_down") != std::string::npos);
}

TEST_CASE("an empty error is reported as an internal bug, never as success") {
  std::string message;
  CHECK(thrown_class(caf::error{}, &message) == "error");
  CHECK(message.find("ctx") != std::string::npos);
  CHECK(message.find("internal bug") != std::string::npos);
}

} // TEST_SUITE
