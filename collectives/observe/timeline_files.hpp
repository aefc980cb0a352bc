#pragma once

#include <string>
#include <vector>

/// Where HOROVOD_TIMELINE puts each rank's Chrome trace, and how to join
/// them (the launcher merges them when every rank ran on this machine).
namespace hvactor::collectives {

/// Every rank's file for HOROVOD_TIMELINE=`pattern`, in rank order: every
/// "{rank}" replaced by the rank; without one, rank 0 writes `pattern` and
/// rank r > 0 writes "<pattern>.rank<r>".
std::vector<std::string> timeline_files(const std::string& pattern, int size);

/// Writes the events of every file of `inputs` into `output` as one JSON
/// array (one row per rank). Throws hvactor::error naming a file it cannot
/// read or write.
void merge_timelines(const std::vector<std::string>& inputs, const std::string& output);

} // namespace hvactor::collectives
