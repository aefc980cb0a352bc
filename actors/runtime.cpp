#include "hvactor/runtime.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

#include <cxxopts.hpp>

#include "hvactor/actors/horovod_worker.hpp"
#include "hvactor/actors/node_agent.hpp"
#include "hvactor/env.hpp"
#include "hvactor/errors.hpp"
#include "hvactor/log.hpp"
#include "hvactor/system_config.hpp"
#include "runtime_impl.hpp"

namespace hvactor {

namespace {

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    throw error("cannot resolve /proc/self/exe: workers need the driver's binary");
  return std::string(buf, static_cast<size_t>(n));
}

std::string host_name() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in{text};
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty())
      ids.push_back(std::stoi(item));
  return ids;
}

// Consumes hvactor's own options; everything else stays for the program.
void parse_args(int argc, char** argv, runtime_options& opts, std::vector<std::string>& rest) {
  cxxopts::Options parser{argc > 0 ? argv[0] : "hvactor", "hvactor runtime options"};
  parser.allow_unrecognised_options();
  parser.add_options()("address", "cluster to join (HOST:PORT)", cxxopts::value<std::string>())(
    "num-cpus", "CPUs the embedded node offers", cxxopts::value<int>())(
    "num-gpus", "GPUs the embedded node offers", cxxopts::value<int>())(
    "gpu-ids", "GPU ids the embedded node offers (comma-separated)",
    cxxopts::value<std::string>())("node-id", "id of the embedded node",
                                   cxxopts::value<std::string>());
  try {
    auto result = parser.parse(argc, argv);
    if (result.count("address"))
      opts.address = result["address"].as<std::string>();
    if (result.count("num-cpus"))
      opts.num_cpus = result["num-cpus"].as<int>();
    if (result.count("num-gpus"))
      opts.num_gpus = result["num-gpus"].as<int>();
    if (result.count("gpu-ids"))
      opts.gpu_ids = parse_ids(result["gpu-ids"].as<std::string>());
    if (result.count("node-id"))
      opts.node_id = result["node-id"].as<std::string>();
    rest.clear();
    if (argc > 0)
      rest.emplace_back(argv[0]);
    for (auto& arg : result.unmatched())
      rest.push_back(arg);
  } catch (const cxxopts::exceptions::exception& e) {
    throw std::invalid_argument(std::string{"hvactor::runtime: "} + e.what());
  }
  if (opts.num_cpus < 0)
    throw std::invalid_argument("--num-cpus must be >= 0: Got " + std::to_string(opts.num_cpus)
                                + ".");
}

} // namespace

runtime::runtime(int argc, char** argv, runtime_options defaults) : impl_(new impl) {
  if (is_worker_process())
    serve_worker(); // never returns
  auto& st = *impl_;
  st.opts = std::move(defaults);
  for (int i = 0; i < argc; ++i)
    st.original_args.emplace_back(argv[i]);
  parse_args(argc, argv, st.opts, st.args);
  if (st.opts.address.empty())
    st.opts.address = env::get(env::address).value_or("");
  if (!st.opts.address.empty())
    throw std::invalid_argument("hvactor::runtime: joining a cluster (--address "
                                + st.opts.address
                                + ") needs hvactor-node, which this build does not have yet; "
                                  "omit --address to use the embedded local cluster");
  st.executable = self_executable();
  if (st.opts.num_cpus == 0)
    st.opts.num_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (st.opts.gpu_ids.empty() && st.opts.num_gpus > 0)
    for (int i = 0; i < st.opts.num_gpus; ++i)
      st.opts.gpu_ids.push_back(i);
  st.opts.num_gpus = static_cast<int>(st.opts.gpu_ids.size());
  if (st.opts.node_id.empty())
    st.opts.node_id = host_name();
  st.cfg = std::make_unique<caf::actor_system_config>();
  configure_system(*st.cfg);
  st.sys = std::make_unique<caf::actor_system>(*st.cfg);
  node_agent_config node{st.opts.node_id, host_name(), st.bind_host, st.opts.num_cpus,
                         st.opts.gpu_ids};
  st.local_agent = spawn_node_agent(*st.sys, node);
  st.agents.push_back(st.local_agent);
  log::debug("embedded cluster: node '{}' with {} CPUs and {} GPUs", st.opts.node_id,
             st.opts.num_cpus, st.opts.num_gpus);
}

runtime::~runtime() {
  if (!impl_ || !impl_->sys)
    return;
  caf::anon_send_exit(impl_->local_agent, caf::exit_reason::user_shutdown);
  impl_->local_agent = nullptr;
  impl_->agents.clear();
  // ~actor_system waits for every actor; never let a stuck actor hang the
  // program's exit.
  std::mutex mtx;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog{[&] {
    std::unique_lock<std::mutex> guard{mtx};
    if (!cv.wait_for(guard, std::chrono::seconds(10), [&] { return done; })) {
      log::error("actor system did not stop within 10 s; exiting");
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }};
  impl_->sys.reset();
  {
    std::lock_guard<std::mutex> guard{mtx};
    done = true;
  }
  cv.notify_all();
  watchdog.join();
}

const std::vector<std::string>& runtime::args() const noexcept {
  return impl_->args;
}

const runtime_options& runtime::options() const noexcept {
  return impl_->opts;
}

} // namespace hvactor
