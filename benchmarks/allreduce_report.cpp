#include "allreduce_report.hpp"

#include <vector>

#include <fmt/format.h>

#include "allreduce_method.hpp"

namespace hvactor::bench {

std::string cell(opt v, int width, int precision) {
  return v ? fmt::format("{:>{}.{}f}", *v, width, precision) : fmt::format("{:>{}}", "n/a", width);
}

opt bandwidth(size_t bytes, opt us, double factor) {
  if (!us || *us <= 0)
    return {};
  return static_cast<double>(bytes) / (*us * 1e3) * factor;
}

opt ratio(opt num, opt den) {
  if (!num || !den || *den <= 0)
    return {};
  return *num / *den;
}

void print_header(bool mpi_tcp) {
  std::string l1 = fmt::format("#{:>10} {:>10} {:>5} {:>5} | {:^26} | {:^18} | {:^18} |", "", "",
                               "", "", "hvactor", "raw gloo", "mpi (sm)");
  std::string l2 = fmt::format("#{:>10} {:>10} {:>5} {:>5} | {:>10} {:>7} {:>7} | {:>10} {:>7} | "
                               "{:>10} {:>7} |",
                               "size", "count", "type", "algo", "time_us", "algbw", "busbw",
                               "time_us", "busbw", "time_us", "busbw");
  if (mpi_tcp) {
    l1 += fmt::format(" {:^18} |", "mpi (tcp lo)");
    l2 += fmt::format(" {:>10} {:>7} |", "time_us", "busbw");
  }
  l1 += " bandwidth ratio (>1: hvactor faster)";
  l2 += fmt::format(" {:>12} {:>11}", "hvactor/gloo", "hvactor/mpi");
  if (mpi_tcp)
    l2 += fmt::format(" {:>15}", "hvactor/mpi-tcp");
  fmt::print("{}\n{}\n", l1, l2);
}

void print_row(bool mpi_tcp, int n, const row& r) {
  double f = allreduce_bus_factor(n);
  std::string line = fmt::format(
    " {:>10} {:>10} {:>5} {:>5} | {} {} {} | {} {} | {} {} |", r.bytes, r.bytes / sizeof(float),
    "float", r.algorithm, cell(r.hv_us, 10, 1), cell(bandwidth(r.bytes, r.hv_us), 7, 3),
    cell(bandwidth(r.bytes, r.hv_us, f), 7, 3), cell(r.gloo_us, 10, 1),
    cell(bandwidth(r.bytes, r.gloo_us, f), 7, 3), cell(r.mpi_us, 10, 1),
    cell(bandwidth(r.bytes, r.mpi_us, f), 7, 3));
  if (mpi_tcp)
    line += fmt::format(" {} {} |", cell(r.tcp_us, 10, 1), cell(bandwidth(r.bytes, r.tcp_us, f), 7, 3));
  line += fmt::format(" {} {}", cell(ratio(r.gloo_us, r.hv_us), 12, 3),
                      cell(ratio(r.mpi_us, r.hv_us), 11, 3));
  if (mpi_tcp)
    line += " " + cell(ratio(r.tcp_us, r.hv_us), 15, 3);
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void print_latency(bool mpi_tcp, const std::map<size_t, row>& rows) {
  fmt::print("\n# rank 0 per-call p50, us (robust against this VM's 4 ms scheduler-tick tails)\n#{:>10} | {:>10} {:>10} {:>10}{} | "
             "{:>18}\n",
             "size", "hvactor", "gloo", "mpi", mpi_tcp ? fmt::format(" {:>10}", "mpi-tcp") : "",
             "p50 hvactor/gloo");
  for (auto& [bytes, r] : rows) {
    if (!r.hv_p50)
      continue;
    fmt::print(" {:>10} | {} {} {}{} | {}\n", bytes, cell(r.hv_p50, 10, 1), cell(r.gloo_p50, 10, 1),
               cell(r.mpi_p50, 10, 1), mpi_tcp ? " " + cell(r.tcp_p50, 10, 1) : "",
               cell(ratio(r.hv_p50, r.gloo_p50), 18, 3));
  }
}

void print_targets(int n, const std::map<size_t, row>& rows, opt fusion_speedup) {
  opt worst_bw, worst_lat, worst_p50_bw;
  size_t worst_bw_at = 0, worst_lat_at = 0, worst_p50_bw_at = 0;
  for (auto& [bytes, r] : rows) {
    auto bw = ratio(r.gloo_us, r.hv_us);
    if (bw && bytes >= (size_t{256} << 10) && (!worst_bw || *bw < *worst_bw)) {
      worst_bw = bw;
      worst_bw_at = bytes;
    }
    auto lat = ratio(r.hv_p50, r.gloo_p50);
    auto p50_bw = ratio(r.gloo_p50, r.hv_p50);
    if (p50_bw && bytes >= (size_t{256} << 10) && (!worst_p50_bw || *p50_bw < *worst_p50_bw)) {
      worst_p50_bw = p50_bw;
      worst_p50_bw_at = bytes;
    }
    if (lat && bytes <= 4096 && (!worst_lat || *lat > *worst_lat)) {
      worst_lat = lat;
      worst_lat_at = bytes;
    }
  }
  auto line = [](const char* what, opt value, size_t at, const char* target, bool ok) {
    if (!value)
      fmt::print("#   {:<44} not measured ({})\n", what, target);
    else
      fmt::print("#   {:<44} {:.3f}x{} ({}): {}\n", what, *value,
                 at ? fmt::format(" at {} B", at) : "", target, ok ? "met" : "NOT met");
  };
  fmt::print("\n# targets, N={} (as measured in this run)\n", n);
  line("bandwidth vs raw gloo, worst size >= 256 KiB:", worst_bw, worst_bw_at, "target >= 0.95",
       worst_bw && *worst_bw >= 0.95);
  line("p50 bandwidth vs raw gloo, worst size >= 256 KiB:", worst_p50_bw, worst_p50_bw_at,
       "target >= 0.95", worst_p50_bw && *worst_p50_bw >= 0.95);
  line("p50 latency vs raw gloo, worst size <= 4 KiB:", worst_lat, worst_lat_at, "target <= 1.2",
       worst_lat && *worst_lat <= 1.2);
  line("fusion speedup, grouped vs separate:", fusion_speedup, 0, "target >= 5 over Gloo",
       fusion_speedup && *fusion_speedup >= 5);
  // Shared memory against Open MPI's (issue targets at 2 ranks).
  opt mpi_lat, mpi_bw;
  size_t mpi_lat_at = 0, mpi_bw_at = 0;
  for (auto& [bytes, r] : rows) {
    auto lat = ratio(r.hv_p50, r.mpi_p50);
    if (lat && bytes <= 4096 && (!mpi_lat || *lat > *mpi_lat)) {
      mpi_lat = lat;
      mpi_lat_at = bytes;
    }
    auto bw = ratio(r.mpi_us, r.hv_us);
    if (bw && bytes >= (size_t{1} << 20) && (!mpi_bw || *bw < *mpi_bw)) {
      mpi_bw = bw;
      mpi_bw_at = bytes;
    }
  }
  line("p50 latency vs Open MPI, worst size <= 4 KiB:", mpi_lat, mpi_lat_at,
       n == 2 ? "target <= 2" : "reported", mpi_lat && *mpi_lat <= 2);
  line("busbw vs Open MPI, worst size >= 1 MiB:", mpi_bw, mpi_bw_at,
       n == 2 ? "target >= 1" : "reported", mpi_bw && *mpi_bw >= 1);
}

namespace {

std::string csv_value(opt v) {
  return v ? fmt::format("{:.6g}", *v) : "";
}

} // namespace

void csv_header(std::FILE* csv) {
  std::fputs("scenario,ranks,size,count,type,algorithm,hvactor_time_us,hvactor_algbw,"
             "hvactor_busbw,hvactor_p50_us,gloo_time_us,gloo_busbw,gloo_p50_us,mpi_time_us,"
             "mpi_busbw,mpi_p50_us,mpi_tcp_time_us,mpi_tcp_busbw,mpi_tcp_p50_us,"
             "hvactor_vs_gloo,hvactor_vs_mpi,hvactor_vs_mpi_tcp\n",
             csv);
}

void csv_row(std::FILE* csv, int n, const std::string& scenario, size_t bytes,
             const std::string& algorithm, opt hv_us, opt hv_p50, const row* r) {
  if (csv == nullptr)
    return;
  double f = allreduce_bus_factor(n);
  row empty;
  const row& x = r ? *r : empty;
  std::vector<std::string> cells{
    scenario, std::to_string(n), std::to_string(bytes), std::to_string(bytes / sizeof(float)),
    "float", algorithm, csv_value(hv_us), csv_value(bandwidth(bytes, hv_us)),
    csv_value(bandwidth(bytes, hv_us, f)), csv_value(hv_p50), csv_value(x.gloo_us),
    csv_value(bandwidth(bytes, x.gloo_us, f)), csv_value(x.gloo_p50), csv_value(x.mpi_us),
    csv_value(bandwidth(bytes, x.mpi_us, f)), csv_value(x.mpi_p50), csv_value(x.tcp_us),
    csv_value(bandwidth(bytes, x.tcp_us, f)), csv_value(x.tcp_p50),
    csv_value(ratio(x.gloo_us, hv_us)), csv_value(ratio(x.mpi_us, hv_us)),
    csv_value(ratio(x.tcp_us, hv_us))};
  std::string line;
  for (auto& c : cells)
    line += (line.empty() ? "" : ",") + c;
  std::fprintf(csv, "%s\n", line.c_str());
  std::fflush(csv);
}

} // namespace hvactor::bench
