#pragma once

// hvactor-run --config-file: horovodrun's YAML of flags
// (horovod/runner/common/util/config_parser.py's sections and keys):
//
//   params:          {fusion_threshold_mb, cycle_time_ms, cache_capacity,
//                     hierarchical_allreduce, hierarchical_allgather}
//   autotune:        {enabled, log_file, warmup_samples, steps_per_sample,
//                     bayes_opt_max_samples, gaussian_process_noise}
//   timeline:        {filename, mark_cycles}
//   stall_check:     {enabled, warning_time_seconds, shutdown_time_seconds}
//   library_options: {gloo_timeout_seconds, thread_affinity}
//   logging:         {level}
//   controller:      gloo

#include <functional>
#include <string>
#include <vector>

namespace hvactor::run_tool {

/// The flags `path` sets, as command-line words ("--fusion-threshold-mb",
/// "64", "--no-hierarchical-allreduce", ...). A key whose flag `given`
/// says is on the command line is left out: the command line wins, as in
/// horovodrun. Throws std::invalid_argument naming the file and the key for
/// an unknown key, a value of the wrong type or out of range, and the keys
/// of horovodrun's that hvactor has no setting for (MPI, torus allreduce,
/// NCCL streams, log timestamps).
std::vector<std::string> config_file_words(const std::string& path,
                                           const std::function<bool(const std::string&)>& given);

} // namespace hvactor::run_tool
