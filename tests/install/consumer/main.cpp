// Install smoke test: built against an *installed* hvactor via
// find_package(hvactor) and hvactor::hvactor; runs one 2-worker executor job
// and a 2-trial hvactor::tune experiment.
#include <hvactor/hvactor.hpp>
#include <hvactor/tune.hpp>

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <iostream>

namespace {

// One worker's result: a plain value, or something optional-like
// (expected / optional) holding it.
template <class T>
bool is_42(const T& v) {
  if constexpr (requires { static_cast<bool>(v == 42); }) {
    return v == 42;
  } else {
    return static_cast<bool>(v) && *v == 42;
  }
}

// All results: a range of per-worker results, or an optional-like wrapper
// around one.
template <class R>
bool check(const R& r, std::size_t expected_count) {
  if constexpr (requires { r.begin(); r.end(); }) {
    std::size_t n = 0;
    for (const auto& v : r) {
      if (!is_42(v)) return false;
      ++n;
    }
    if (n != expected_count) {
      std::cerr << "consumer: expected " << expected_count << " results, got " << n << "\n";
      return false;
    }
    return true;
  } else {
    return static_cast<bool>(r) && check(*r, expected_count);
  }
}

void tune_loop(hvactor::train::context& ctx) {
  double x = ctx.config().at("x").as_double();
  hvactor::train::report({{"loss", (x - 2) * (x - 2)}});
}

}  // namespace

int main(int argc, char** argv) {
  hvactor::runtime rt{argc, argv};
  hvactor::executor ex{rt, hvactor::executor::create_settings({}), {.num_workers = 2}};
  ex.start();
  auto r = ex.run([](int x) { return x + 1; }, 41);
  ex.shutdown();
  if (!check(r, 2)) {
    std::cerr << "consumer: wrong results\n";
    return 1;
  }
  auto storage = std::filesystem::temp_directory_path() / ("hvactor-consumer-tune-" + std::to_string(::getpid()));
  namespace tune = hvactor::tune;
  tune::tuner t{rt, tune::trainer_factory{tune_loop},
                {.param_space = {{"x", tune::grid_search({1.0, 2.0})}},
                 .tune_config = {.metric = "loss", .mode = "min"},
                 .run = {.name = "consumer", .storage_path = storage.string(), .verbose = 0}}};
  auto grid = t.fit();
  auto best_x = grid.get_best_result().config.at("x").as_double();
  std::filesystem::remove_all(storage);
  if (grid.size() != 2 || best_x != 2.0) {
    std::cerr << "consumer: tune found x = " << best_x << " of " << grid.size() << " trials\n";
    return 1;
  }
  std::cout << "consumer ok" << std::endl;
  return 0;
}
