// binary_shipping: what shipping the driver's binary to the nodes costs.
//
// The binary hvactor ships is always the driver's own executable, so the
// driver here is the example simple_fn itself (and, for a big binary, a copy
// of it padded with random bytes: an ELF runs unchanged with data after its
// end). Each repetition starts a fresh 3-node local cluster (head + 2
// hvactor-node processes, 1 CPU each, new work dirs, so the binary cache is
// empty) and runs `DRIVER --address HEAD --num-workers 3` twice: cold (the
// coordinator ships the binary to all 3 nodes) and warm (cached). Ship cost
// = cold - warm wall time of the whole driver process.
//
// Peers in the same run, same bytes, same number of copies, in parallel:
// a raw TCP loopback transfer (a sender and a receiver thread per copy,
// 4 MiB chunks, the receiver writes a file) and `cp` into a directory; and,
// to split hvactor's cost, the SHA-256 every node computes over its copy.
//
//   binary_shipping [--reps 5] [--pad-mb 64] [--simple-fn PATH]
//                   [--hvactor-node PATH]

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include "base/internal/file_digest.hpp"

#include "local_cluster.hpp"
#include "bench_method.hpp"

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace bench = hvactor::bench;


namespace {

constexpr int copies = 3; // nodes that each get the binary
constexpr size_t chunk = 4 << 20;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// -1 (printed as such) when a phase has no sample (bench_method.hpp).
double median(std::vector<double> v) {
  return hvactor::bench::median(std::move(v), -1);
}

std::string load_average() {
  std::ifstream in{"/proc/loadavg"};
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double min_of(const std::vector<double>& v) {
  return v.empty() ? -1 : *std::min_element(v.begin(), v.end());
}

// A copy of `src` with `pad_mb` MiB of pseudo-random bytes appended.
std::string make_padded(const std::string& src, const std::string& dst, int pad_mb) {
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  std::ofstream out{dst, std::ios::binary | std::ios::app};
  std::vector<uint64_t> buf(1 << 17); // 1 MiB
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int mb = 0; mb < pad_mb; ++mb) {
    for (auto& w : buf) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = x;
    }
    out.write(reinterpret_cast<const char*>(buf.data()),
              static_cast<std::streamsize>(buf.size() * sizeof(uint64_t)));
  }
  out.close();
  fs::permissions(dst, fs::perms::owner_all);
  return dst;
}

// -- the product: a driver that ships itself -------------------------------

// The coordinator's own measure (debug log): "binary shipped (N bytes) in
// X ms", from the first has_bin to the last chunk acknowledged (after each
// node verified its copy's SHA-256); -1 when absent.
double logged_ship_ms(const std::string& err_log) {
  std::ifstream in{err_log};
  const std::string needle = "binary shipped (";
  for (std::string line; std::getline(in, line);) {
    auto at = line.find(needle);
    if (at == std::string::npos)
      continue;
    auto in_at = line.find(") in ", at);
    if (in_at != std::string::npos)
      return std::stod(line.substr(in_at + 5));
  }
  return -1;
}

// Wall time of one `driver --address A --num-workers 3`; -1 on failure.
double run_driver(const std::string& driver, const std::string& address, const std::string& log) {
  auto t0 = clock_type::now();
  auto pid = bench::spawn_process({driver, "--address", address, "--num-workers",
                                   std::to_string(copies)},
                                  log + ".out", log + ".err", {"HVACTOR_LOG_LEVEL=debug"});
  int rc = bench::wait_process(pid, 120s);
  double ms = ms_since(t0);
  if (rc == -1)
    rc = bench::stop_process(pid);
  if (rc != 0) {
    std::fprintf(stderr, "driver %s failed (exit %d); stderr:%s\n", driver.c_str(), rc,
                 bench::tail_of(log + ".err").c_str());
    return -1;
  }
  return ms;
}

int count_cached(const std::vector<std::string>& work_dirs, uintmax_t size) {
  int n = 0;
  for (auto& w : work_dirs) {
    std::error_code ec;
    for (auto& e : fs::directory_iterator(w + "/bin", ec))
      if (e.is_regular_file() && e.file_size() == size)
        ++n;
  }
  return n;
}

struct product_result {
  std::vector<double> cold, warm, ship, logged;
  int cached_copies = 0;
};

product_result measure_product(const std::string& driver, const std::string& node_binary,
                               const std::string& dir, int reps) {
  product_result out;
  auto size = fs::file_size(driver);
  for (int r = 0; r < reps; ++r) {
    auto rep_dir = fmt::format("{}/rep-{}-{}", dir, fs::path(driver).filename().string(), r);
    bench::local_cluster cluster{{node_binary, copies, 1, rep_dir}};
    double cold = run_driver(driver, cluster.address(), rep_dir + "/cold");
    double logged = logged_ship_ms(rep_dir + "/cold.err");
    out.cached_copies = count_cached(cluster.work_dirs(), size);
    double warm = run_driver(driver, cluster.address(), rep_dir + "/warm");
    cluster.stop();
    bench::remove_dir(rep_dir);
    if (cold < 0 || warm < 0)
      continue;
    out.cold.push_back(cold);
    out.warm.push_back(warm);
    out.ship.push_back(cold - warm);
    if (logged >= 0)
      out.logged.push_back(logged);
  }
  return out;
}

// -- peers -----------------------------------------------------------------

int listen_loopback(uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::listen(fd, 4) != 0)
    throw std::runtime_error("cannot listen on 127.0.0.1");
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

void receive_to_file(int listener, const std::string& path) {
  int conn = ::accept(listener, nullptr, nullptr);
  int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
  std::vector<char> buf(chunk);
  for (;;) {
    auto n = ::read(conn, buf.data(), buf.size());
    if (n <= 0)
      break;
    for (ssize_t done = 0; done < n;) {
      auto w = ::write(out, buf.data() + done, static_cast<size_t>(n - done));
      if (w <= 0)
        break;
      done += w;
    }
  }
  ::close(out);
  ::close(conn);
}

void send_file(uint16_t port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return;
  }
  int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::vector<char> buf(chunk);
  for (;;) {
    auto n = ::read(in, buf.data(), buf.size());
    if (n <= 0)
      break;
    for (ssize_t done = 0; done < n;) {
      auto w = ::send(fd, buf.data() + done, static_cast<size_t>(n - done), MSG_NOSIGNAL);
      if (w <= 0)
        break;
      done += w;
    }
  }
  ::close(in);
  ::close(fd);
}

// `copies` parallel TCP loopback transfers of `path`, each into a file.
double tcp_copy_ms(const std::string& path, const std::string& dir) {
  std::vector<int> listeners;
  std::vector<uint16_t> ports(copies);
  for (int i = 0; i < copies; ++i)
    listeners.push_back(listen_loopback(ports[i]));
  auto t0 = clock_type::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < copies; ++i) {
    threads.emplace_back(receive_to_file, listeners[i], fmt::format("{}/tcp-{}", dir, i));
    threads.emplace_back(send_file, ports[i], path);
  }
  for (auto& t : threads)
    t.join();
  double ms = ms_since(t0);
  for (int i = 0; i < copies; ++i) {
    ::close(listeners[i]);
    ::unlink(fmt::format("{}/tcp-{}", dir, i).c_str());
  }
  return ms;
}

// `copies` parallel `cp path dir/cp-i`.
double cp_ms(const std::string& path, const std::string& dir) {
  auto t0 = clock_type::now();
  std::vector<pid_t> pids;
  for (int i = 0; i < copies; ++i)
    pids.push_back(bench::spawn_process({"/bin/cp", path, fmt::format("{}/cp-{}", dir, i)}));
  for (auto pid : pids)
    bench::wait_process(pid, 60s);
  double ms = ms_since(t0);
  for (int i = 0; i < copies; ++i)
    ::unlink(fmt::format("{}/cp-{}", dir, i).c_str());
  return ms;
}

// What every node does after the last chunk: SHA-256 of its copy, here
// the product's own sha256_file, `copies` in parallel.
double verify_ms(const std::string& path) {
  auto t0 = clock_type::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < copies; ++i)
    threads.emplace_back([&] { hvactor::sha256_file(path); });
  for (auto& t : threads)
    t.join();
  return ms_since(t0);
}

double mb_per_s(uintmax_t bytes, double ms) {
  return ms > 0 ? static_cast<double>(bytes) / 1e6 / (ms / 1000) : 0;
}

} // namespace

int main(int argc, char** argv) {
  cxxopts::Options parser{"binary_shipping", "cost of shipping the driver's binary"};
  // clang-format off
  parser.add_options()
    ("reps", "fresh clusters (cold + warm run each) per binary", cxxopts::value<int>()->default_value("5"))
    ("pad-mb", "MiB of random bytes appended for the big binary", cxxopts::value<int>()->default_value("64"))
    ("simple-fn", "path of the simple_fn example", cxxopts::value<std::string>()->default_value(HVACTOR_SIMPLE_FN_BIN))
    ("hvactor-node", "path of hvactor-node", cxxopts::value<std::string>()->default_value(HVACTOR_NODE_BIN))
    ("h,help", "print this help");
  // clang-format on
  auto opts = parser.parse(argc, argv);
  if (opts.count("help")) {
    std::printf("%s\n", parser.help().c_str());
    return 0;
  }
  int reps = std::max(1, opts["reps"].as<int>());
  int pad_mb = std::max(1, opts["pad-mb"].as<int>());
  auto node_binary = opts["hvactor-node"].as<std::string>();
  auto dir = bench::make_temp_dir("hvactor-binary-shipping");
  int rc = 0;
  try {
    std::vector<std::pair<std::string, std::string>> binaries{
      {"simple_fn", opts["simple-fn"].as<std::string>()},
      {fmt::format("simple_fn+{}MiB", pad_mb),
       make_padded(opts["simple-fn"].as<std::string>(), dir + "/simple_fn_padded", pad_mb)}};
    std::printf("hvactor binary shipping: driver = the binary shipped; fresh 3-node local "
                "cluster (head + 2 hvactor-node, 1 CPU each) per rep, cold run (ships to 3 "
                "nodes) then warm run (cached); %u cores (load %s), %d reps\n",
                std::max(1u, std::thread::hardware_concurrency()), load_average().c_str(), reps);
    std::printf("ship_ms = median over reps of (cold - warm) driver wall time; total_MB = "
                "bytes x 3 copies; peers move the same 3 copies in parallel\n\n");
    std::printf("coord_ship_ms: the coordinator's own measure of shipping (debug log: first "
                "has_bin to last chunk acknowledged, node-side SHA-256 verify included); "
                "sha256_x3_ms: the product's sha256_file on 3 copies in parallel\n\n");
    std::printf("%-16s %10s %6s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %9s\n",
                "binary", "bytes", "cached", "cold_ms", "(min)", "warm_ms", "(min)", "ship_ms",
                "MB/s", "coord_ms", "tcp_ms", "tcp_MB/s", "cp_ms", "cp_MB/s", "sha256x3",
                "ship/tcp");
    for (auto& [label, path] : binaries) {
      auto size = fs::file_size(path);
      auto product = measure_product(path, node_binary, dir, reps);
      std::vector<double> tcp, cp, sha;
      for (int r = 0; r < std::max(reps, 3); ++r) {
        tcp.push_back(tcp_copy_ms(path, dir));
        cp.push_back(cp_ms(path, dir));
        sha.push_back(verify_ms(path));
      }
      auto total = size * copies;
      double ship = median(product.ship);
      double t = median(tcp);
      std::printf("%-16s %10ju %4d/%d %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f %8.1f %8.1f %8.0f "
                  "%8.1f %8.0f %8.1f %8.1fx\n",
                  label.c_str(), size, product.cached_copies, copies, median(product.cold),
                  min_of(product.cold), median(product.warm), min_of(product.warm), ship,
                  mb_per_s(total, ship), median(product.logged), t, mb_per_s(total, t),
                  median(cp), mb_per_s(total, median(cp)), median(sha), t > 0 ? ship / t : 0.0);
      std::fflush(stdout);
      if (product.cold.size() != static_cast<size_t>(reps))
        rc = 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "binary_shipping: %s\n", e.what());
    rc = 1;
  }
  bench::remove_dir(dir);
  return rc;
}
