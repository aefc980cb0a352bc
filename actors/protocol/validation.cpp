#include "hvactor/settings.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hvactor {

namespace {

void require_positive(const char* name, const std::optional<int>& value) {
  if (value && *value < 1)
    throw std::invalid_argument(std::string{name} + " must be >= 1: Got " + std::to_string(*value)
                                + ".");
}

// `text` with control characters written as \xNN, for error messages.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void require_positive(const char* name, std::chrono::milliseconds value) {
  if (value.count() < 1)
    throw std::invalid_argument(std::string{name} + " must be > 0 ms: Got "
                                + std::to_string(value.count()) + " ms.");
}

} // namespace

void validate(const settings& s) {
  require_positive("timeout", s.timeout);
  require_positive("placement_timeout", s.placement_timeout);
  require_positive("call_timeout", s.call_timeout);
  if (s.stderr_tail_lines < 0)
    throw std::invalid_argument("stderr_tail_lines must be >= 0: Got "
                                + std::to_string(s.stderr_tail_lines) + ".");
}

void validate(const executor_options& opts) {
  bool elastic = opts.min_workers.has_value() || opts.max_workers.has_value();
  if (opts.min_workers && opts.num_workers)
    throw std::invalid_argument("Both min_workers and num_workers provided. Only one of the above "
                                "is allowed as workloads cannot be elastic and non-elastic.");
  if (opts.max_workers && (!opts.min_workers || *opts.min_workers < 1))
    throw std::invalid_argument("max_workers provided without any positive min_workers. Elastic "
                                "workloads require a positive min_workers.");
  if (opts.min_workers && opts.num_hosts)
    throw std::invalid_argument("num_hosts cannot be combined with min_workers. Elastic workloads "
                                "place one worker per discovered slot.");
  if (!elastic) {
    if (!opts.num_workers && !opts.num_hosts)
      throw std::invalid_argument("One of num_workers or num_hosts must be set.");
    if (opts.num_workers && opts.num_hosts)
      throw std::invalid_argument("Only one of num_workers and num_hosts must be set.");
  }
  if (opts.num_hosts && !opts.num_workers_per_host)
    throw std::invalid_argument("num_workers_per_host must be set with num_hosts.");
  require_positive("num_workers", opts.num_workers);
  require_positive("num_hosts", opts.num_hosts);
  require_positive("num_workers_per_host", opts.num_workers_per_host);
  if (opts.num_hosts && opts.num_workers_per_host
      && int64_t{*opts.num_hosts} * *opts.num_workers_per_host > std::numeric_limits<int>::max())
    throw std::invalid_argument("num_hosts * num_workers_per_host must be <= "
                                + std::to_string(std::numeric_limits<int>::max()) + ": Got "
                                + std::to_string(*opts.num_hosts) + " * "
                                + std::to_string(*opts.num_workers_per_host) + ".");
  require_positive("min_workers", opts.min_workers);
  require_positive("max_workers", opts.max_workers);
  if (opts.cpus_per_worker < 1)
    throw std::invalid_argument("cpus_per_worker must be >= 1: Got "
                                + std::to_string(opts.cpus_per_worker) + ".");
  if (opts.gpus_per_worker && !opts.use_gpu)
    throw std::invalid_argument("gpus_per_worker is set, but use_gpu is False. use_gpu must be "
                                "True if gpus_per_worker is set.");
  if (opts.use_gpu && opts.gpus_per_worker && *opts.gpus_per_worker < 1)
    throw std::invalid_argument("gpus_per_worker must be >= 1: Got "
                                + std::to_string(*opts.gpus_per_worker) + ".");
  if (opts.min_workers && opts.max_workers && *opts.max_workers < *opts.min_workers)
    throw std::invalid_argument("max_workers must be >= min_workers: Got "
                                + std::to_string(*opts.max_workers) + " < "
                                + std::to_string(*opts.min_workers) + ".");
  if (opts.reset_limit && *opts.reset_limit < 0)
    throw std::invalid_argument("reset_limit must be >= 0: Got " + std::to_string(*opts.reset_limit)
                                + ".");
  for (auto& [name, value] : opts.extra_env_vars) {
    if (name.empty() || name.find_first_of(std::string{"=\0", 2}) != std::string::npos)
      throw std::invalid_argument("extra_env_vars names must be non-empty and contain neither "
                                  "'=' nor NUL: Got '"
                                  + printable(name) + "'.");
    if (value.find('\0') != std::string::npos)
      throw std::invalid_argument("extra_env_vars values must not contain NUL: Got '"
                                  + printable(name) + "' = '" + printable(value) + "'.");
  }
  if (opts.min_workers) {
    if (opts.elastic_timeout.count() <= 0)
      throw std::invalid_argument("elastic_timeout must be positive: Got "
                                  + std::to_string(opts.elastic_timeout.count()) + " s.");
    if (opts.discovery_period.count() <= 0)
      throw std::invalid_argument("discovery_period must be positive: Got "
                                  + std::to_string(opts.discovery_period.count()) + " ms.");
  }
  if (opts.cooldown_range) {
    auto [lower, upper] = *opts.cooldown_range;
    if (lower < 1 || upper > 3600 || lower > upper)
      throw std::invalid_argument("cooldown_range must satisfy 1 <= lower <= upper <= 3600: Got ("
                                  + std::to_string(lower) + ", " + std::to_string(upper) + ").");
  }
}

void validate_node_id(const std::string& id) {
  auto allowed = [](unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.'
           || c == '_' || c == '-';
  };
  bool ok = !id.empty() && id.size() <= max_node_id_length && id.front() != '.'
            && id.front() != '-';
  for (unsigned char c : id)
    ok = ok && allowed(c);
  if (!ok)
    throw std::invalid_argument(
      "node id must be 1-" + std::to_string(max_node_id_length)
      + " characters from A-Z a-z 0-9 . _ - and not start with '.' or '-': Got '" + printable(id)
      + "'.");
}

std::vector<int> parse_gpu_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream in{text};
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty())
      continue;
    size_t used = 0;
    int id = -1;
    try {
      id = std::stoi(item, &used);
    } catch (const std::exception&) {
    }
    if (id < 0 || used != item.size())
      throw std::invalid_argument("--gpu-ids must be comma-separated non-negative integers: '"
                                  + text + "'");
    ids.push_back(id);
  }
  return ids;
}

} // namespace hvactor
