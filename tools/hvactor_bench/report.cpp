#include "tools/hvactor_bench/report.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <gloo/config.h>

#ifdef HVACTOR_BENCH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace hvactor::bench_tool {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else
      out += c;
  }
  return out + "\"";
}

std::string json_numbers(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i)
    out += fmt::format("{}{:.3f}", i ? ", " : "", v[i]);
  return out + "]";
}

namespace {

std::string cpu_model() {
  std::ifstream in{"/proc/cpuinfo"};
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0)
      return line.substr(line.find(':') + 2);
  return "unknown";
}

// Interfaces that are up and have an IPv4/IPv6 address (loopback too: on
// one machine the collectives run over it).
std::vector<std::string> nics() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return {};
  for (auto* a = list; a != nullptr; a = a->ifa_next)
    if (a->ifa_addr != nullptr && (a->ifa_flags & IFF_UP) != 0
        && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6))
      out.insert(a->ifa_name);
  ::freeifaddrs(list);
  return {out.begin(), out.end()};
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i)
    out += (i ? ", " : "") + json_string(v[i]);
  return out + "]";
}

} // namespace

std::string machine_json(const std::vector<std::string>& node_ids, const std::string& path) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  std::string nccl = "null", cuda = "null";
#ifdef HVACTOR_BENCH_CUDA
  nccl = json_string(fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    cuda = json_string(fmt::format("{}.{}", v / 1000, v % 1000 / 10));
#endif
  return fmt::format(
    "{{\"cpu_model\": {}, \"cores\": {}, \"hostname\": {}, \"nics\": {}, \"hvactor_version\": {}, "
    "\"gloo_version\": {}, \"nccl_version\": {}, \"cuda_version\": {}, \"node_ids\": {}, "
    "\"path\": {}}}",
    json_string(cpu_model()), std::thread::hardware_concurrency(), json_string(host),
    json_strings(nics()), json_string(HVACTOR_BENCH_VERSION),
    json_string(fmt::format("{}.{}.{}", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH)),
    nccl, cuda, json_strings(node_ids), path.empty() ? "null" : json_string(path));
}

std::string json_head(const std::string& subcommand, const std::vector<std::string>& node_ids,
                      const std::string& path, const std::string& settings) {
  return "{\n  \"tool\": \"hvactor-bench\",\n  \"subcommand\": " + json_string(subcommand)
         + ",\n  \"machine\": " + machine_json(node_ids, path) + ",\n  \"settings\": " + settings
         + ",\n  \"results\": [\n";
}

void check_writable(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  if (path.empty())
    throw std::invalid_argument(fmt::format("{}: the file name is empty", option));
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (fs::is_directory(st))
    throw std::invalid_argument(fmt::format("{} {}: is a directory", option, path));
  if (fs::exists(st)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw std::invalid_argument(
        fmt::format("{} {}: cannot write it: {}", option, path, std::strerror(errno)));
    return;
  }
  auto dir = fs::path{path}.parent_path();
  if (dir.empty())
    dir = ".";
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(
      fmt::format("{} {}: the folder {} does not exist", option, path, dir.string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument(fmt::format("{} {}: cannot create files in {}: {}", option, path,
                                            dir.string(), std::strerror(errno)));
}

std::vector<int> parse_int_list(const std::string& text, const char* option, int lo, int hi) {
  std::vector<int> out;
  size_t pos = 0;
  while (true) {
    auto comma = text.find(',', pos);
    auto word = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long n = 0;
    try {
      n = std::stol(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (word.empty() || used != word.size() || n < lo || n > hi)
      throw std::invalid_argument(fmt::format("{} {}: '{}' is not a number in {}..{}", option,
                                              text, word, lo, hi));
    out.push_back(static_cast<int>(n));
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  if (out.size() > 64)
    throw std::invalid_argument(fmt::format("{}: at most 64 values", option));
  return out;
}

progress::progress() : tty_(::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {
}

void progress::show(const std::string& what) {
  if (!tty_)
    return;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  fmt::print(stderr, "\r\033[K{}, {:.1f} s", what, s);
  std::fflush(stderr);
}

void progress::clear() {
  if (tty_) {
    fmt::print(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

} // namespace hvactor::bench_tool
