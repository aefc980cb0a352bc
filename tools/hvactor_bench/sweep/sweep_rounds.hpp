#pragma once

// The rounds of a collective's sweep (sweep.cpp): the warm-up round that
// fixes each size's call counts, then, round after round, hvactor's warm
// workers and each peer's one job over every size, the order rotating;
// the median round per size, with the rounds' range.

#include <functional>
#include <string>
#include <vector>

#include <hvactor/hvactor.hpp>

#include "tools/hvactor_bench/peers/peer.hpp"
#include "tools/hvactor_bench/report.hpp"
#include "tools/hvactor_bench/sweep/sweep_types.hpp"

namespace hvactor::bench_tool {

/// Timed calls per size for `call_us` per call: 1000 where 1000 take at
/// most `seconds`, else `seconds`' worth (at least 5).
int auto_iters(double call_us, double seconds);

/// The warm-up round: a few untimed hvactor calls of every size, whose
/// times (`call_us`) give each size's call counts (--iters/-w, or auto),
/// the same for hvactor and every peer.
std::vector<peer_size> call_counts(hvactor::executor& ex, const config& c,
                                   const std::vector<size_t>& sizes, progress& line,
                                   std::vector<double>& call_us);

/// Every round, then each row's median, range and bandwidths. With
/// c.spmd_after, the spmd peer's rounds come after the others' and after
/// `release_workers()` (which ends the executor's job).
std::vector<row> measure_rounds(hvactor::executor& ex, const config& c,
                                const std::vector<peer_size>& counts,
                                const std::vector<double>& call_us, progress& line,
                                std::string& path_info,
                                const std::function<void()>& release_workers);

} // namespace hvactor::bench_tool
