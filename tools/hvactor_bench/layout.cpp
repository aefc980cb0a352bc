#include "layout.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "internal/slurm.hpp"

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
      l.np = l.num_hosts * l.per_host;
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
  std::vector<char*> argv{const_cast<char*>("hvactor-bench")};
  for (auto& w : words) {
    if (w == "-np")
      w = "--np";
    argv.push_back(w.data());
  }
  cxxopts::ParseResult o;
  try {
    o = p.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const cxxopts::exceptions::incorrect_argument_type& e) {
    // cxxopts names the value, not the option: find the option it followed.
    std::string what = e.what(), value;
    auto open = what.find("\u2018"), close = what.find("\u2019");
    if (open != std::string::npos && close != std::string::npos && close > open)
      value = what.substr(open + 3, close - open - 3);
    for (size_t i = 1; i < words.size(); ++i)
      if (words[i] == value && words[i - 1].rfind("-", 0) == 0)
        throw std::invalid_argument(
          fmt::format("{} {}: not a number", words[i - 1] == "--np" ? "-np" : words[i - 1], value));
    for (auto& w : words)
      if (auto eq = w.find('='); eq != std::string::npos && w.substr(eq + 1) == value)
        throw std::invalid_argument(fmt::format("{}: not a number", w));
    throw std::invalid_argument(what);
  }
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
