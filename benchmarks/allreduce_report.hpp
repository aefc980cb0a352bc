#pragma once

// The allreduce benchmark's output: nccl-tests' columns per world size, the
// p50 latency table, the targets, and the optional CSV file.

#include <cstddef>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace hvactor::bench {

using opt = std::optional<double>;

/// One size at one world size, every implementation (times in us).
struct row {
  size_t bytes = 0;
  std::string algorithm;
  opt hv_us, hv_p50, gloo_us, gloo_p50, mpi_us, mpi_p50, tcp_us, tcp_p50;
};

/// `v` right-aligned in `width` with `precision` decimals, or "n/a".
std::string cell(opt v, int width, int precision);

/// bytes / time in GB/s (1e9 B/s), times `factor` (the bus factor).
opt bandwidth(size_t bytes, opt us, double factor = 1);

/// num / den, when both are there.
opt ratio(opt num, opt den);

/// The two header lines of the main table; `mpi_tcp` adds its columns.
void print_header(bool mpi_tcp);

/// One line of the main table for world size `n`.
void print_row(bool mpi_tcp, int n, const row& r);

/// Rank 0's per-call p50 for sizes <= 4 KiB.
void print_latency(bool mpi_tcp, const std::map<size_t, row>& rows);

/// The targets for world size `n`, as measured (printed, never
/// asserted).
void print_targets(int n, const std::map<size_t, row>& rows, opt fusion_speedup);

/// Writes the CSV header line.
void csv_header(std::FILE* csv);

/// Writes one CSV line (nothing when `csv` is null); `r` supplies the peer
/// columns, or none.
void csv_row(std::FILE* csv, int n, const std::string& scenario, size_t bytes,
             const std::string& algorithm, opt hv_us, opt hv_p50, const row* r);

} // namespace hvactor::bench
