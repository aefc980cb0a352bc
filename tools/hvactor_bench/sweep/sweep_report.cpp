// hvactor-bench's sweep reports: JSON (every sample), CSV, and a gnuplot
// figure.

#include "tools/hvactor_bench/sweep/sweep_types.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "base/internal/process.hpp"
#include "tools/hvactor_bench/report.hpp"

namespace hvactor::bench_tool {

void write_json(const config& c, const std::vector<row>& rows, const std::vector<std::string>& nodes,
                const std::string& path_info) {
  std::ofstream out{c.json};
  if (!out)
    throw std::runtime_error("cannot write " + c.json);
  std::string peers;
  for (auto& p : c.peers)
    peers += (peers.empty() ? "" : ", ") + json_string(p);
  out << json_head(c.kind, nodes, path_info,
                   fmt::format("{{\"ranks\": {}, \"num_hosts\": {}, \"per_host\": {}, "
                               "\"type\": \"float\", \"redop\": \"sum\", \"iters\": {}, "
                               "\"warmup\": {}, \"seconds\": {}, \"rounds\": {}, \"check\": {}, "
                               "\"backend\": {}, \"device\": {}, \"peers\": [{}], "
                               "\"load\": {}, \"load_kind\": \"{}\", \"path\": {}}}",
                               c.where.np, c.where.num_hosts, c.where.per_host,
                               c.iters > 0 ? std::to_string(c.iters) : "\"auto\"",
                               c.warmup >= 0 ? std::to_string(c.warmup) : "\"auto\"", c.seconds,
                               c.rounds,
                               c.check, json_string(c.backend), c.gpu ? "\"gpu\"" : "\"cpu\"",
                               peers, c.load, c.load_kind == load_type::spin ? "spin" : "fork",
                               json_string(c.path)));
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& r = rows[i];
    out << fmt::format("    {{\"size\": {}, \"count\": {}, \"type\": \"float\", \"redop\": \"sum\", "
                       "\"iters\": {}, \"warmup\": {}, \"time_us\": {:.3f}, \"range\": {:.4f}, "
                       "\"round_us\": {}, \"algbw\": {:.4f}, \"busbw\": {:.4f}, \"wrong\": {}, "
                       "\"samples_us\": {}, \"peers\": {{",
                       r.bytes, r.count, r.iters, r.warmup, r.time_us, r.range,
                       json_numbers(r.round_us), r.algbw, r.busbw, r.wrong, json_numbers(r.samples));
    for (size_t j = 0; j < r.peers.size(); ++j) {
      auto& p = r.peers[j];
      out << fmt::format("{}{}: {{\"time_us\": {:.3f}, \"range\": {:.4f}, \"round_us\": {}, "
                         "\"busbw\": {:.4f}, \"wrong\": {}, \"ratio\": {:.4f}, "
                         "\"samples_us\": {}}}",
                         j ? ", " : "", json_string(p.name), p.time_us, p.range,
                         json_numbers(p.round_us), p.busbw, p.wrong, ratio(r, p),
                         json_numbers(p.samples));
    }
    out << "}}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

void write_csv(const config& c, const std::vector<row>& rows) {
  std::ofstream out{c.csv};
  if (!out)
    throw std::runtime_error("cannot write " + c.csv);
  out << "size,count,type,redop,iters,time_us,range,algbw,busbw,wrong";
  for (auto& p : c.peers)
    out << fmt::format(",{0}_time_us,{0}_range,{0}_busbw,{0}_wrong,{0}_ratio", p);
  out << "\n";
  for (auto& r : rows) {
    out << fmt::format("{},{},float,sum,{},{:.3f},{:.4f},{:.4f},{:.4f},{}", r.bytes, r.count,
                       r.iters, r.time_us, r.range, r.algbw, r.busbw, r.wrong);
    for (auto& p : r.peers)
      out << fmt::format(",{:.3f},{:.4f},{:.4f},{},{:.4f}", p.time_us, p.range, p.busbw, p.wrong,
                         ratio(r, p));
    out << "\n";
  }
}

namespace {

// `s` as a gnuplot single-quoted string: only the quote itself is special
// there (doubled); backquotes and dollars are not expanded inside it.
std::string gnuplot_quoted(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\n' || ch == '\r' || ch == '\0')
      throw std::invalid_argument("a file name with a line break cannot go to gnuplot");
    out += ch == '\'' ? std::string{"''"} : std::string{ch};
  }
  return out + "'";
}

} // namespace

// busbw and time per call against the message size, log scales, for
// hvactor and each peer, through gnuplot. gnuplot runs without a shell on
// a script and data of its own in a private folder (mkdtemp, 0700) and draws
// there; the picture is then copied to --plot. The user's file name never
// reaches a shell or a gnuplot command line.
void plot(const config& c, const std::vector<row>& rows) {
  namespace fs = std::filesystem;
  auto tmpl = (fs::temp_directory_path() / "hvactor-bench-plot-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error(fmt::format("--plot: cannot create {}: {}", tmpl, std::strerror(errno)));
  fs::path dir = tmpl;
  bool svg = c.plot.substr(c.plot.size() - 4) == ".svg";
  auto data = dir / "data.dat", script = dir / "plot.gp", picture = dir / (svg ? "plot.svg" : "plot.png");
  // Only the files written here are removed, then the folder made above.
  auto clean = [&] {
    for (auto& f : {data, script, picture})
      ::unlink(f.c_str());
    ::rmdir(dir.c_str());
  };
  try {
    {
      std::ofstream out{data};
      for (auto& r : rows) {
        out << fmt::format("{} {:.6f} {:.6f}", r.bytes, r.busbw, r.time_us);
        for (auto& p : r.peers)
          out << fmt::format(" {:.6f} {:.6f}", p.busbw, p.time_us);
        out << "\n";
      }
    }
    auto series = [&](int first_col) {
      std::string s = fmt::format("{} using 1:{} with linespoints title 'hvactor (executor)'",
                                  gnuplot_quoted(data.string()), first_col);
      for (size_t i = 0; i < c.peers.size(); ++i)
        s += fmt::format(", '' using 1:{} with linespoints title '{}'", first_col + 2 + 2 * i,
                         c.peers[i] == "spmd"   ? "hvactor (SPMD, hvactor-run)"
                         : c.peers[i] == "mpi"  ? "Open MPI"
                         : c.peers[i] == "gloo" ? "raw Gloo"
                         : c.peers[i] == "nccl" ? "raw NCCL"
                                                : "torch.distributed (gloo)");
      return s;
    };
    {
      std::ofstream gp{script};
      gp << (svg ? "set terminal svg size 1000,420 dynamic\n" : "set terminal pngcairo size 1000,420\n")
         << "set output " << gnuplot_quoted(picture.string()) << "\n"
         << "set multiplot layout 1,2 title 'hvactor-bench " << c.kind << ", " << c.where.np
         << " ranks (float32 sum)'\n"
         << "set logscale x 2\nset format x '2^{%L}'\nset grid\n"
         << "set xlabel 'message size (bytes)'\nset key top left\n"
         << "set ylabel 'busbw (GB/s)'\nplot " << series(2) << "\n"
         << "set logscale y 10\nset ylabel 'time per call (us)'\nplot " << series(3) << "\n"
         << "unset multiplot\nunset output\n";
      if (!gp)
        throw std::runtime_error("cannot write " + script.string());
    }
    process_spec spec;
    spec.executable = c.gnuplot;
    spec.args = {c.gnuplot, script.string()};
    spec.capture_stdout = true;
    spec.echo_stderr = false;
    auto r = run_command(spec, std::chrono::seconds(60));
    if (r.timed_out || r.exit.exit_code != 0 || !fs::exists(picture))
      throw std::runtime_error(fmt::format(
        "gnuplot failed to draw {} ({}): {}", c.plot,
        r.timed_out ? "ran past 60 s" : describe_exit(r.exit.exit_code, r.exit.signal),
        fmt::join(r.exit.stderr_tail, " | ")));
    std::error_code ec;
    fs::copy_file(picture, c.plot, fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw std::runtime_error(fmt::format("--plot {}: cannot write it: {}", c.plot, ec.message()));
  } catch (...) {
    clean();
    throw;
  }
  clean();
  fmt::print("# plot: {}\n", c.plot);
}

} // namespace hvactor::bench_tool
