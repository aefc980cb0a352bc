#pragma once

// hvactor::horovod_runner: Databricks' HorovodRunner (API.md
// "HorovodRunner"). run(main, args...) runs main on np workers and returns
// rank 0's value.

#include <memory>
#include <string>
#include <type_traits>

#include "hvactor/executor.hpp"
#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"

namespace hvactor {

struct horovod_runner_options {
  /// np > 0: np workers on the cluster, gang-started (all or nothing).
  /// np = -n: n worker processes on the driver's machine only (also when
  /// the runtime joined a cluster). 0 is an error.
  int np = 0;
  /// "all": every worker's stdout and stderr lines reach the driver,
  /// tagged "[1,<rank>]<stdout>:"; "log_callback_only": only
  /// hvactor::log::event records do ("[1,<rank>]<event>:").
  std::string driver_log_verbosity = "all";
  /// The job's timeouts.
  hvactor::settings settings;
};

class horovod_runner {
public:
  /// Validates `opts` (std::invalid_argument): np = 0, np < -(the driver
  /// machine's CPUs), an unknown driver_log_verbosity.
  horovod_runner(runtime& rt, horovod_runner_options opts);
  ~horovod_runner();

  horovod_runner(const horovod_runner&) = delete;
  horovod_runner& operator=(const horovod_runner&) = delete;

  /// Runs `main(args...)` on every worker (a plain function or captureless
  /// lambda, as executor::run) and returns rank 0's value; a worker's
  /// failure throws hvactor::worker_error.
  template <class F, class... Args>
  auto run(F main, Args&&... args) {
    using R = typename detail::fn_traits<F>::result_type;
    auto ex = start();
    if constexpr (std::is_void_v<R>) {
      ex->run(main, std::forward<Args>(args)...);
      ex->shutdown();
    } else {
      auto out = ex->run(main, std::forward<Args>(args)...);
      ex->shutdown();
      return R(std::move(out.at(0)));
    }
  }

  int np() const noexcept;

private:
  std::unique_ptr<executor> start();

  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor
