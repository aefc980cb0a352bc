// horovod_runner: an executor with HorovodRunner's placement (np > 0 on the
// cluster, np < 0 on the driver's machine) and log verbosity.

#include "hvactor/horovod_runner.hpp"

#include <cstdint>

#include <fmt/format.h>

#include "driver/internal/executor_access.hpp"
#include "driver/internal/output_printer.hpp"
#include "driver/internal/runtime_impl.hpp"

namespace hvactor {

struct horovod_runner::impl {
  runtime& rt;
  horovod_runner_options opts;
  std::shared_ptr<output_printer> printer = std::make_shared<output_printer>("", false);
};

horovod_runner::horovod_runner(runtime& rt, horovod_runner_options opts) {
  auto& v = opts.driver_log_verbosity;
  if (v != "all" && v != "log_callback_only")
    throw std::invalid_argument(fmt::format(
      "driver_log_verbosity must be \"all\" or \"log_callback_only\": Got \"{}\".", v));
  if (opts.np == 0)
    throw std::invalid_argument(
      "np must be > 0 (processes on the cluster) or < 0 (-n: n processes on the driver's "
      "machine only): Got 0.");
  if (opts.np < 0) {
    // In 64 bits: -INT_MIN does not fit an int.
    auto wanted = -static_cast<int64_t>(opts.np);
    auto cpus = rt.impl_->driver_cpus();
    if (wanted > cpus)
      throw std::invalid_argument(
        fmt::format("np = {} asks for {} processes on the driver's machine, which offers {} "
                    "CPUs: Got {}.",
                    opts.np, wanted, cpus, opts.np));
  }
  validate(opts.settings);
  impl_.reset(new impl{rt, std::move(opts)});
}

horovod_runner::~horovod_runner() = default;

int horovod_runner::np() const noexcept {
  return impl_->opts.np;
}

std::unique_ptr<executor> horovod_runner::start() {
  auto& st = *impl_;
  auto n = st.opts.np > 0 ? st.opts.np : -st.opts.np;
  auto ex = std::make_unique<executor>(st.rt, st.opts.settings, executor_options{.num_workers = n});
  if (st.opts.np < 0)
    executor_access::run_on_driver_only(*ex);
  auto printer = st.printer;
  if (st.opts.driver_log_verbosity == "all")
    executor_access::set_output(*ex, proto::output_forward,
                                [printer](int rank, int stream, const std::string& line) {
                                  printer->line(rank, stream, line);
                                });
  else
    executor_access::set_output(*ex, proto::output_drop, nullptr);
  ex->on_event([printer](int rank, const std::map<std::string, std::string>& kv) {
    printer->event(rank, kv);
  });
  ex->start();
  return ex;
}

} // namespace hvactor
