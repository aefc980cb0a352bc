#pragma once

// What every hvactor-bench subcommand reports the same way: the machine's
// description, JSON strings, statistics over samples, and the progress line
// on the terminal.

#include <chrono>
#include <string>
#include <vector>

#include "bench_method.hpp"

namespace hvactor::bench_tool {

/// `s` as a JSON string literal, quotes included.
std::string json_string(const std::string& s);

/// `v` as a JSON array of numbers with 3 decimals.
std::string json_numbers(const std::vector<double>& v);

/// The "machine" object of every JSON report: CPU model, cores, hostname,
/// the NICs that have an address, hvactor/Gloo/NCCL/CUDA versions (null
/// where not built in), the node ids of the ranks and the collective path
/// (hvd::backend_info(); empty -> null).
std::string machine_json(const std::vector<std::string>& node_ids, const std::string& path);

/// The start of every JSON report, up to the opening of "results": tool,
/// subcommand, machine (machine_json) and `settings` (a JSON object).
std::string json_head(const std::string& subcommand, const std::vector<std::string>& node_ids,
                      const std::string& path, const std::string& settings);

/// The method's statistics (bench_method.hpp).
using bench::ci95;
using bench::mean;
using bench::quantile;

/// "1,2,4" -> {1, 2, 4}; std::invalid_argument naming `option` otherwise.
std::vector<int> parse_int_list(const std::string& text, const char* option, int lo, int hi);

/// Refuses (std::invalid_argument naming `option`) an output file that could
/// not be written at the end of a run: a directory, a file without write
/// permission, a missing or unwritable folder. Checked before a sweep, so a
/// typo costs no measurement; nothing is created.
void check_writable(const std::string& path, const char* option);

/// The one-line progress report on stderr: shown only when stderr is a
/// terminal, rewritten in place, erased by clear().
class progress {
public:
  progress();
  void show(const std::string& what);
  void clear();

private:
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace hvactor::bench_tool
