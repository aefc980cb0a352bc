#include "tools/cluster/slurm_env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "hvactor/settings.hpp"

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

// `text` for a message: control characters as \xNN, at most 200 bytes.
std::string shown(std::string_view text) {
  std::string out;
  for (unsigned char c : text.substr(0, 200))
    out += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c)
                                 : std::string(1, static_cast<char>(c));
  if (text.size() > 200)
    out += fmt::format("... ({} bytes)", text.size());
  return out;
}

int parse_count(std::string_view text, std::string_view variable, std::string_view list) {
  if (!all_digits(text) || text.size() > 6)
    throw std::invalid_argument(
      fmt::format("{}={}: '{}' is not a count", variable, shown(list), shown(text)));
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

void validate_job_id(std::string_view value, std::string_view variable) {
  // DIGITS, DIGITS_DIGITS or DIGITS+DIGITS.
  size_t sep = value.find_first_of("_+");
  auto head = value.substr(0, sep);
  auto tail = sep == std::string_view::npos ? std::string_view{"0"} : value.substr(sep + 1);
  if (value.size() > max_job_id_length || !all_digits(head) || !all_digits(tail))
    throw std::invalid_argument(fmt::format(
      "{}='{}' is not a Slurm job id (digits, optionally _N for an array task or +N for a "
      "heterogeneous component, at most {} characters); it names directories, so nothing else "
      "is accepted",
      variable, shown(value), max_job_id_length));
}

int allocation::default_ranks() const {
  if (ntasks)
    return *ntasks;
  long long sum = 0;
  for (int t : tasks_per_node)
    sum += t;
  auto too_many = [](long long n, const std::string& from) {
    if (n > max_ranks)
      throw std::invalid_argument(fmt::format("{} make {} ranks, more than the {} an allocation "
                                              "may have",
                                              from, n, max_ranks));
  };
  too_many(sum, fmt::format("SLURM_TASKS_PER_NODE over {} nodes", tasks_per_node.size()));
  if (sum > 0)
    return static_cast<int>(sum);
  long long nodes_count = static_cast<long long>(nodes.size());
  if (gpus_per_node > 0) {
    too_many(gpus_per_node * nodes_count, fmt::format("{}={} GPUs x {} nodes", gpus_variable,
                                                      gpus_per_node, nodes_count));
    return static_cast<int>(gpus_per_node * nodes_count);
  }
  too_many(nodes_count, "SLURM_JOB_NODELIST's nodes");
  return static_cast<int>(nodes_count);
}

namespace {

// One count read from `variable`, within [lo, hi].
int bounded_count(const std::string& value, const char* variable, int lo, int hi) {
  int n = parse_count(value, variable, value);
  if (n < lo || n > hi)
    throw std::invalid_argument(fmt::format("{}={}: must be in {}..{}", variable, value, lo, hi));
  return n;
}

// A compressed per-node list that must cover exactly the node list, each
// count within [lo, hi].
std::vector<int> per_node_counts(const std::string& value, const char* variable,
                                 const std::string& nodelist, size_t nodes, int lo, int hi) {
  auto counts = expand_counts(value, variable);
  if (counts.size() != nodes)
    throw std::invalid_argument(fmt::format(
      "{}={} gives counts for {} node{}, but SLURM_JOB_NODELIST={} lists {}; they must cover "
      "the same nodes",
      variable, shown(value), counts.size(), counts.size() == 1 ? "" : "s", shown(nodelist),
      nodes));
  for (int c : counts)
    if (c < lo || c > hi)
      throw std::invalid_argument(
        fmt::format("{}={}: a node's count {} is not in {}..{}", variable, shown(value), c, lo, hi));
  return counts;
}

} // namespace

std::optional<allocation> allocation_from_env() {
  auto job = get("SLURM_JOB_ID");
  auto list = get("SLURM_JOB_NODELIST");
  if (!job)
    return std::nullopt;
  validate_job_id(*job, "SLURM_JOB_ID");
  if (!list)
    throw std::invalid_argument(fmt::format(
      "SLURM_JOB_ID={} is set but SLURM_JOB_NODELIST is {}: hvactor cannot tell the "
      "allocation's nodes (salloc and sbatch set both). To run on this machine only, unset "
      "SLURM_JOB_ID (env -u SLURM_JOB_ID ...) or pass --launcher local",
      *job, std::getenv("SLURM_JOB_NODELIST") == nullptr ? "not set" : "empty"));
  allocation a;
  a.job_id = *job;
  try {
    a.nodes = expand_hostlist(*list);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string{"SLURM_JOB_NODELIST: "} + e.what());
  }
  // Node names become node ids, certificate and directory names.
  for (const auto& node : a.nodes)
    try {
      validate_node_id(node);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(
        fmt::format("SLURM_JOB_NODELIST={}: node name refused: {}", shown(*list), e.what()));
    }
  if (auto cpus = get("SLURM_JOB_CPUS_PER_NODE"))
    a.cpus = per_node_counts(*cpus, "SLURM_JOB_CPUS_PER_NODE", *list, a.nodes.size(), 1,
                             max_cpus_per_node);
  // salloc and sbatch export the job's task count; srun steps export
  // SLURM_NTASKS too, but hvactor-run runs in the allocation, not a step.
  if (auto n = get("SLURM_NTASKS"))
    a.ntasks = bounded_count(*n, "SLURM_NTASKS", 1, static_cast<int>(max_ranks));
  if (auto t = get("SLURM_TASKS_PER_NODE"))
    a.tasks_per_node = per_node_counts(*t, "SLURM_TASKS_PER_NODE", *list, a.nodes.size(), 1,
                                       max_tasks_per_node);
  if (auto g = get("SLURM_GPUS_ON_NODE")) {
    a.gpus_per_node = bounded_count(*g, "SLURM_GPUS_ON_NODE", 0, max_gpus_per_node);
  } else if (auto gj = get("SLURM_JOB_GPUS")) {
    auto n = std::count(gj->begin(), gj->end(), ',') + 1;
    if (n > max_gpus_per_node)
      throw std::invalid_argument(fmt::format("SLURM_JOB_GPUS lists {} GPUs, more than {} per node",
                                              n, max_gpus_per_node));
    a.gpus_per_node = static_cast<int>(n);
    a.gpus_variable = "SLURM_JOB_GPUS";
  }
  a.default_ranks(); // refuses an allocation that implies too many ranks
  return a;
}

} // namespace hvactor::slurm
