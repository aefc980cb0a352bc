#pragma once

// Where a subcommand's ranks run, as every subcommand takes it: -np N
// (packed onto as few nodes as fit) or --num-hosts H --per-host K; inside a
// Slurm allocation (started through hvactor-run --driver) the allocation's
// tasks by default.

#include <functional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include <hvactor/hvactor.hpp>

namespace hvactor::bench_tool {

struct layout {
  int np = 2;
  /// 0 unless --num-hosts/--per-host (or a uniform Slurm allocation).
  int num_hosts = 0, per_host = 0;

  void apply(hvactor::executor_options& o) const;
};

/// Adds -np/--np, --num-hosts and --per-host to `p`.
void add_layout_options(cxxopts::Options& p);

/// The layout the options ask for; std::invalid_argument for conflicting or
/// out-of-range values.
layout parse_layout(const cxxopts::ParseResult& o);

/// Parses `args` from index `first` with `p` (accepting nccl-tests' and
/// mpirun's single-dash -np); std::invalid_argument for a stray argument.
cxxopts::ParseResult parse_words(cxxopts::Options& p, const std::vector<std::string>& args,
                                 size_t first);

/// Runs a subcommand's main body and maps its exceptions to hvactor-bench's
/// exit codes: 2 with the message for bad options, 1 for a failed run.
int exit_code_of(const std::function<int()>& body);

} // namespace hvactor::bench_tool
