#include "tools/hvactor_bench/layout.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "tools/cluster/slurm_env.hpp"
#include "options.hpp"

namespace hvactor::bench_tool {

void layout::apply(hvactor::executor_options& o) const {
  if (num_hosts > 0) {
    o.num_hosts = num_hosts;
    o.num_workers_per_host = per_host;
  } else {
    o.num_workers = np;
  }
}

void add_layout_options(cxxopts::Options& p) {
  // clang-format off
  p.add_options()
    ("n,np", "ranks (packed onto as few nodes as fit); in a Slurm allocation: the allocation's tasks",
     cxxopts::value<int>())
    ("num-hosts", "distinct nodes (with --per-host)", cxxopts::value<int>())
    ("per-host", "ranks per node (with --num-hosts)", cxxopts::value<int>());
  // clang-format on
}

layout parse_layout(const cxxopts::ParseResult& o) {
  layout l;
  if (o.count("num-hosts") != o.count("per-host"))
    throw std::invalid_argument("--num-hosts and --per-host go together");
  if (o.count("num-hosts") && o.count("np"))
    throw std::invalid_argument("-np or --num-hosts/--per-host, not both");
  if (o.count("num-hosts")) {
    l.num_hosts = o["num-hosts"].as<int>();
    l.per_host = o["per-host"].as<int>();
    if (l.num_hosts < 1 || l.per_host < 1 || l.num_hosts > 4096 || l.per_host > 4096)
      throw std::invalid_argument("--num-hosts and --per-host must be in 1..4096");
    l.np = l.num_hosts * l.per_host;
  } else if (o.count("np")) {
    l.np = o["np"].as<int>();
  } else if (auto alloc = slurm::allocation_from_env();
             alloc && std::getenv("HVACTOR_BENCH_SLURM") != nullptr) {
    // Started by hvactor-run --driver in an allocation: its tasks, placed
    // as the allocation places them.
    l.np = alloc->default_ranks();
    if (alloc->tasks_per_node.size() == alloc->nodes.size()
        && std::all_of(alloc->tasks_per_node.begin(), alloc->tasks_per_node.end(),
                       [&](int t) { return t == alloc->tasks_per_node.front(); })) {
      l.num_hosts = static_cast<int>(alloc->nodes.size());
      l.per_host = alloc->tasks_per_node.front();
      // In 64 bits, never wrapped.
      auto np = int64_t{l.num_hosts} * l.per_host;
      if (np > 65536)
        throw std::invalid_argument(fmt::format(
          "the allocation's {} nodes x {} tasks = {} ranks; hvactor-bench runs at most 65536",
          l.num_hosts, l.per_host, np));
      l.np = static_cast<int>(np);
    }
  }
  if (l.np < 1 || l.np > 65536)
    throw std::invalid_argument(fmt::format("-np must be in 1..65536 (got {})", l.np));
  return l;
}

cxxopts::ParseResult parse_words(cxxopts::Options& p, const std::vector<std::string>& args,
                                 size_t first) {
  std::vector<std::string> words(args.begin() + static_cast<long>(std::min(first, args.size())),
                                 args.end());
  for (auto& w : words)
    if (w == "-np")
      w = "--np";
  auto o = tool::parse_options(p, "hvactor-bench", std::move(words));
  if (!o.unmatched().empty())
    throw std::invalid_argument("unexpected argument '" + o.unmatched().front() + "'");
  return o;
}

int exit_code_of(const std::function<int()>& body) {
  try {
    return body();
  } catch (const cxxopts::exceptions::exception& e) {
    fmt::print(stderr, "hvactor-bench: {} (see hvactor-bench SUBCOMMAND --help)\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "hvactor-bench: {}\n", e.what());
    return 1;
  }
}

} // namespace hvactor::bench_tool
