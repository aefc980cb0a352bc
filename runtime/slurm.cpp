#include "internal/slurm.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::slurm {

namespace {

[[noreturn]] void invalid(std::string_view list, std::string_view why) {
  throw std::invalid_argument(fmt::format("Invalid hostlist: {} ({})", list, why));
}

bool all_digits(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

// The values of one bracket's body ("1-3,07"), as strings with padding.
std::vector<std::string> bracket_values(std::string_view list, std::string_view body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    auto item = body.substr(start, comma == std::string_view::npos ? body.npos : comma - start);
    size_t dash = item.find('-');
    auto lo = item.substr(0, dash);
    auto hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      invalid(list, fmt::format("'{}' is not a number or a range", item));
    long a = std::strtol(std::string(lo).c_str(), nullptr, 10);
    long b = std::strtol(std::string(hi).c_str(), nullptr, 10);
    if (b < a)
      invalid(list, fmt::format("range '{}' runs backwards", item));
    if (static_cast<size_t>(b - a) >= max_hosts || out.size() + static_cast<size_t>(b - a) >= max_hosts)
      invalid(list, fmt::format("more than {} hosts", max_hosts));
    // Zero padding follows the lower bound's width ("08-11").
    int width = lo.size() > 1 && lo[0] == '0' ? static_cast<int>(lo.size()) : 0;
    for (long v = a; v <= b; ++v)
      out.push_back(fmt::format("{:0{}}", v, width));
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  return out;
}

// One entry ("rack[1-2]-n[1-2]"): literal parts and bracket products.
void expand_entry(std::string_view list, std::string_view entry, std::vector<std::string>& out) {
  if (entry.empty())
    invalid(list, "an empty name");
  std::vector<std::string> partial{""};
  size_t pos = 0;
  bool bracketed = false;
  while (pos < entry.size()) {
    size_t open = entry.find('[', pos);
    auto text = entry.substr(pos, open == std::string_view::npos ? entry.npos : open - pos);
    if (text.find(']') != std::string_view::npos)
      invalid(list, "']' without '['");
    if (open == std::string_view::npos) {
      if (bracketed)
        invalid(list, fmt::format("'{}' after the last range", text));
      for (auto& p : partial)
        p += text;
      break;
    }
    size_t close = entry.find(']', open);
    if (close == std::string_view::npos)
      invalid(list, "'[' without ']'");
    auto body = entry.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos)
      invalid(list, "nested '['");
    auto values = bracket_values(list, body);
    if (partial.size() * values.size() + out.size() > max_hosts)
      invalid(list, fmt::format("more than {} hosts", max_hosts));
    std::vector<std::string> next;
    next.reserve(partial.size() * values.size());
    for (auto& p : partial)
      for (auto& v : values)
        next.push_back(p + std::string(text) + v);
    partial = std::move(next);
    bracketed = true;
    pos = close + 1;
  }
  for (auto& p : partial) {
    if (p.empty())
      invalid(list, "an empty name");
    out.push_back(std::move(p));
  }
}

int parse_count(std::string_view text, std::string_view variable, std::string_view list) {
  if (!all_digits(text) || text.size() > 6)
    throw std::invalid_argument(
      fmt::format("{}={}: '{}' is not a count", variable, list, text));
  return std::atoi(std::string(text).c_str());
}

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return std::nullopt;
  return std::string{v};
}

} // namespace

std::vector<std::string> expand_hostlist(std::string_view list) {
  std::vector<std::string> out;
  if (list.empty())
    invalid(list, "empty");
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    char c = i < list.size() ? list[i] : ',';
    if (c == '[')
      ++depth;
    else if (c == ']' && depth > 0)
      --depth;
    else if (c == ',' && depth == 0) {
      expand_entry(list, list.substr(start, i - start), out);
      start = i + 1;
    } else if (std::isspace(static_cast<unsigned char>(c)))
      invalid(list, "white space");
  }
  if (depth != 0)
    invalid(list, "'[' without ']'");
  return out;
}

std::vector<int> expand_counts(std::string_view list, std::string_view variable) {
  std::vector<int> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    auto item = list.substr(start, comma == std::string_view::npos ? list.npos : comma - start);
    size_t paren = item.find("(x");
    int value = parse_count(item.substr(0, paren), variable, list);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      if (item.back() != ')')
        throw std::invalid_argument(fmt::format("{}={}: '{}' is not N(xM)", variable, list, item));
      repeat = parse_count(item.substr(paren + 2, item.size() - paren - 3), variable, list);
    }
    if (repeat < 1 || out.size() + static_cast<size_t>(repeat) > max_hosts)
      throw std::invalid_argument(fmt::format("{}={}: bad repeat count", variable, list));
    out.insert(out.end(), static_cast<size_t>(repeat), value);
    if (comma == std::string_view::npos)
      break;
    start = comma + 1;
  }
  return out;
}

int allocation::default_ranks() const {
  if (ntasks)
    return *ntasks;
  int sum = 0;
  for (int t : tasks_per_node)
    sum += t;
  if (sum > 0)
    return sum;
  if (gpus_per_node > 0)
    return gpus_per_node * static_cast<int>(nodes.size());
  return static_cast<int>(nodes.size());
}

std::optional<allocation> allocation_from_env() {
  auto job = get("SLURM_JOB_ID");
  auto list = get("SLURM_JOB_NODELIST");
  if (!job || !list)
    return std::nullopt;
  allocation a;
  a.job_id = *job;
  try {
    a.nodes = expand_hostlist(*list);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string{"SLURM_JOB_NODELIST: "} + e.what());
  }
  if (auto cpus = get("SLURM_JOB_CPUS_PER_NODE"))
    a.cpus = expand_counts(*cpus, "SLURM_JOB_CPUS_PER_NODE");
  if (!a.cpus.empty() && a.cpus.size() != a.nodes.size())
    throw std::invalid_argument(fmt::format("SLURM_JOB_CPUS_PER_NODE lists {} nodes, "
                                            "SLURM_JOB_NODELIST {}",
                                            a.cpus.size(), a.nodes.size()));
  // salloc and sbatch export the job's task count; srun steps export
  // SLURM_NTASKS too, but hvactor-run runs in the allocation, not a step.
  if (auto n = get("SLURM_NTASKS"))
    a.ntasks = parse_count(*n, "SLURM_NTASKS", *n);
  if (auto t = get("SLURM_TASKS_PER_NODE"))
    a.tasks_per_node = expand_counts(*t, "SLURM_TASKS_PER_NODE");
  if (auto g = get("SLURM_GPUS_ON_NODE"))
    a.gpus_per_node = parse_count(*g, "SLURM_GPUS_ON_NODE", *g);
  else if (auto gj = get("SLURM_JOB_GPUS"))
    a.gpus_per_node = static_cast<int>(std::count(gj->begin(), gj->end(), ',') + 1);
  return a;
}

} // namespace hvactor::slurm
