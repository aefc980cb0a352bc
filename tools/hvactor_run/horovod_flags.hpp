#pragma once

// horovodrun's flags on hvactor-run (issue 31): the tunables and the
// timeline as the variables the ranks read, --start-timeout apart from the
// collectives' timeout, the network interfaces, logging, --config-file,
// --check-build and --version, and the hosts (-H, --hostfile) a job brings
// up over ssh.

#include <string>
#include <vector>

#include <cxxopts.hpp>


namespace hvactor::run_tool {

struct run_request;

/// The flags' bounds (hvd::init applies the same to the variables), shared
/// with --config-file's keys so that a value out of range in the file is
/// named by the file and its key, not by a flag the user never gave.
namespace limits {
inline constexpr int fusion_threshold_mb = 16384;
inline constexpr double cycle_time_ms = 10000;
inline constexpr int cache_capacity = 1 << 20;
inline constexpr int thread_affinity = 1 << 20;
inline constexpr int autotune_warmup_samples = 1000;
inline constexpr int autotune_steps_per_sample = 100000;
inline constexpr int autotune_bayes_opt_max_samples = 1000;
/// knobs::max_gloo_timeout_seconds (ten years), which fits an int.
inline constexpr int gloo_timeout_seconds = 315360000;
} // namespace limits

/// Declares the flags on `parser`.
void declare_horovod_options(cxxopts::Options& parser);

/// -H / --hostfile and the ssh flags into r.hosts, r.ssh_*.
void read_hosts(const cxxopts::ParseResult& res, run_request& r);

/// Applies them to `r` (after -x: a flag wins over -x for its variable).
/// Throws std::invalid_argument naming the flag and what it must be.
void read_horovod_options(const cxxopts::ParseResult& res, run_request& r);

/// -cb / --check-build: what this build has, in horovodrun's layout.
std::string check_build_text();

/// -v / --version.
std::string version_text();

/// horovodrun's single-dash spellings ("-cb", "-hostfile", "-np") as the
/// long options cxxopts reads; other words unchanged.
std::string long_spelling(const std::string& word);

} // namespace hvactor::run_tool
