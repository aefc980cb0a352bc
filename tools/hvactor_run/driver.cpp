#include "driver.hpp"

#include <chrono>
#include <future>

#include <fmt/format.h>

#include "base/internal/env_names.hpp"
#include "base/internal/process.hpp"

namespace hvactor::run_tool {

int run_driver(const launch_options& o, const std::string& address, const tls::config& tls,
               stop_request& stop) {
  process_spec spec;
  spec.executable = find_program(o.program);
  spec.args = {o.program};
  spec.args.insert(spec.args.end(), o.args.begin(), o.args.end());
  spec.env = {{env::address, address}};
  for (auto& kv : tls::to_env(tls))
    spec.env.push_back(kv);
  for (auto& [k, v] : o.env)
    spec.env.emplace_back(k, v);
  spec.echo_stderr = true;
  std::promise<process_exit> done;
  auto ended = done.get_future();
  auto child = child_process::start(spec, [&done, &stop](process_exit ex) {
    done.set_value(ex);
    stop.notify();
  });
  // Asleep until the driver exits or a signal comes (passed on once).
  auto exited = [&] { return ended.wait_for(std::chrono::seconds{0}) == std::future_status::ready; };
  stop.wait(exited);
  if (!exited())
    child->signal(stop.signal());
  auto ex = ended.get();
  if (ex.signal != 0) {
    fmt::print(stderr, "hvactor-run: the driver {} ended with {}\n", o.program,
               describe_exit(ex.exit_code, ex.signal));
    return 128 + ex.signal;
  }
  return ex.exit_code;
}

} // namespace hvactor::run_tool
