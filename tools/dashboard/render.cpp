#include "render.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "actors/board/job_board.hpp"
#include "collectives/observe/timeline.hpp"

namespace hvactor::dashboard {

namespace {

std::string q(std::string_view s) {
  return "\"" + collectives::json_escape(s) + "\"";
}

// JSON has no NaN or infinity: null.
std::string num(double v) {
  return std::isfinite(v) ? fmt::format("{}", v) : "null";
}

template <class T, class F>
std::string array(const std::vector<T>& xs, F f) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? "," : "") + f(xs[i]);
  return out + "]";
}

std::string node_json(const proto::node_info& n) {
  auto ints = [](const std::vector<int32_t>& v) {
    return array(v, [](int32_t x) { return std::to_string(x); });
  };
  return fmt::format(
    R"({{"node_id":{},"hostname":{},"address":{},"port":{},"version":{},"started_ms":{},)"
    R"("cpus":{{"total":{},"free":{}}},"gpus":{{"total":{},"free":{},"ids":{},"free_ids":{}}},)"
    R"("state":"alive","jobs":{}}})",
    q(n.node_id), q(n.hostname), q(n.address), n.port, q(n.version), n.started_ms, n.total.cpus,
    n.free.cpus, n.total.gpus, n.free.gpus, ints(n.gpu_ids), ints(n.free_gpu_ids),
    array(n.jobs, q));
}

std::string job_json(const proto::job_view& j) {
  auto rank = [](const proto::rank_view& r) {
    return fmt::format(
      R"({{"id":{},"rank":{},"node":{},"pid":{},"state":{},"cpu_seconds":{},"rss_bytes":{}}})",
      r.id, r.rank, q(r.node), r.pid, q(r.state), num(r.cpu_seconds), r.rss_bytes);
  };
  auto op = [](const proto::op_stat& o) {
    return fmt::format(R"({{"op":{},"path":{},"count":{},"bytes":{},"seconds":{}}})", q(o.op),
                       q(o.path), o.count, o.bytes, num(o.seconds));
  };
  return fmt::format(
    R"({{"job_id":{},"driver":{},"kind":{},"state":{},"started_ms":{},"ended_ms":{},"size":{},)"
    R"("generation":{},"resets":{},"ranks":{},"failures":{},"log_tail":{},"timeline":{},)"
    R"("collectives":{},"stalls":{}}})",
    q(j.job_id), q(j.driver), q(j.kind), q(j.state), j.started_ms, j.ended_ms, j.size,
    j.generation, j.resets, array(j.ranks, rank), array(j.failures, q), array(j.log_tail, q),
    q(j.timeline), array(j.ops, op), j.stalls);
}

std::vector<std::string> metric_names(const proto::train_run& r) {
  std::set<std::string> names;
  for (auto& p : r.points)
    for (auto& [name, v] : p.metrics)
      names.insert(name);
  return {names.begin(), names.end()};
}

std::string run_json(const proto::train_run& r) {
  auto point = [](const proto::train_point& p) {
    auto metric = [](const std::pair<std::string, double>& m) {
      return q(m.first) + ":" + num(m.second);
    };
    std::string ms = "{";
    for (size_t i = 0; i < p.metrics.size(); ++i)
      ms += (i ? "," : "") + metric(p.metrics[i]);
    return fmt::format(R"({{"iteration":{},"time_s":{},"metrics":{}}}{})", p.iteration,
                       num(p.time_s), ms, "}");
  };
  return fmt::format(
    R"({{"job_id":{},"run":{},"storage":{},"experiment":{},"reports":{},"metrics":{},)"
    R"("checkpoints":{},"points":{}}})",
    q(r.job_id), q(r.run), q(r.storage), q(r.experiment), r.reports, array(metric_names(r), q),
    array(r.checkpoints, q), array(r.points, point));
}

} // namespace

std::string to_json(const snapshot& s, const std::string& part) {
  if (part == "nodes")
    return array(s.view.nodes, node_json);
  if (part == "jobs")
    return array(s.board.jobs, job_json);
  if (part == "runs")
    return array(s.board.runs, run_json);
  int cpus = 0, free_cpus = 0, gpus = 0, free_gpus = 0;
  for (auto& n : s.view.nodes) {
    cpus += n.total.cpus;
    free_cpus += n.free.cpus;
    gpus += n.total.gpus;
    free_gpus += n.free.gpus;
  }
  return fmt::format(
    R"({{"head":{{"node_id":{},"started_ms":{},"uptime_s":{},"now_ms":{}}},)"
    R"("totals":{{"nodes":{},"cpus":{},"cpus_free":{},"gpus":{},"gpus_free":{}}},)"
    R"("nodes":{},"jobs":{},"runs":{}}})",
    q(s.head_id), s.head_started_ms, (s.now_ms - s.head_started_ms) / 1000, s.now_ms,
    s.view.nodes.size(), cpus, free_cpus, gpus, free_gpus, array(s.view.nodes, node_json),
    array(s.board.jobs, job_json), array(s.board.runs, run_json));
}

namespace {

// A label value: well-formed UTF-8 (an invalid byte as U+FFFD: a node's id
// is not the board's to clean), backslash, quote and newline escaped.
std::string label(std::string_view v) {
  std::string out;
  for (char c : board_text(v, std::string::npos))
    if (c == '\\' || c == '"')
      out += {'\\', c};
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  return out;
}

// The text of a scrape. A series (a name and its labels) is written once:
// Prometheus refuses a whole scrape that repeats one.
struct exposition {
  std::string out;
  std::set<std::string> series;
  void family(const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, const std::string& labels, double v) {
    if (!series.insert(fmt::format("{}{{{}}}", name, labels)).second)
      return;
    out += fmt::format("{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                       labels.empty() ? "" : "}",
                       std::isnan(v) ? "NaN" : std::isinf(v) ? (v > 0 ? "+Inf" : "-Inf")
                                                             : fmt::format("{}", v));
  }
};

// Each job's collective operations by kind and path (its ranks added up),
// and its stall warnings.
void collective_families(exposition& e, const snapshot& s) {
  auto labels = [](const proto::job_view& j, const proto::op_stat& o) {
    return fmt::format("job=\"{}\",op=\"{}\",path=\"{}\"", label(j.job_id), label(o.op),
                       label(o.path));
  };
  e.family("hvactor_collective_operations_total", "counter",
           "Collective operations of a job's ranks, by kind and path.");
  for (auto& j : s.board.jobs)
    for (auto& o : j.ops)
      e.sample("hvactor_collective_operations_total", labels(j, o), static_cast<double>(o.count));
  e.family("hvactor_collective_bytes_total", "counter",
           "Bytes of the ranks' buffers in a job's collective operations.");
  for (auto& j : s.board.jobs)
    for (auto& o : j.ops)
      e.sample("hvactor_collective_bytes_total", labels(j, o), static_cast<double>(o.bytes));
  e.family("hvactor_collective_seconds_total", "counter",
           "Seconds a job's ranks spent in collective operations (negotiation excluded).");
  for (auto& j : s.board.jobs)
    for (auto& o : j.ops)
      e.sample("hvactor_collective_seconds_total", labels(j, o), o.seconds);
  e.family("hvactor_negotiation_stalls_total", "counter",
           "Stall inspector warnings of a job (ranks waiting on others' submissions).");
  for (auto& j : s.board.jobs)
    e.sample("hvactor_negotiation_stalls_total", fmt::format("job=\"{}\"", label(j.job_id)),
             static_cast<double>(j.stalls));
}

} // namespace

std::string to_prometheus(const snapshot& s) {
  exposition e;
  e.family("hvactor_nodes", "gauge", "Nodes in the cluster.");
  e.sample("hvactor_nodes", "", static_cast<double>(s.view.nodes.size()));
  e.family("hvactor_node_cpus", "gauge", "CPUs a node offers.");
  for (auto& n : s.view.nodes)
    e.sample("hvactor_node_cpus", fmt::format("node=\"{}\"", label(n.node_id)), n.total.cpus);
  e.family("hvactor_node_cpus_free", "gauge", "CPUs of a node no job holds.");
  for (auto& n : s.view.nodes)
    e.sample("hvactor_node_cpus_free", fmt::format("node=\"{}\"", label(n.node_id)), n.free.cpus);
  e.family("hvactor_node_gpus", "gauge", "GPUs a node offers.");
  for (auto& n : s.view.nodes)
    e.sample("hvactor_node_gpus", fmt::format("node=\"{}\"", label(n.node_id)), n.total.gpus);
  e.family("hvactor_node_gpus_free", "gauge", "GPUs of a node no job holds.");
  for (auto& n : s.view.nodes)
    e.sample("hvactor_node_gpus_free", fmt::format("node=\"{}\"", label(n.node_id)), n.free.gpus);
  e.family("hvactor_jobs", "gauge", "Jobs the head knows, by state.");
  std::map<std::string, int> jobs{{"placing", 0}, {"starting", 0}, {"running", 0},
                                  {"stopping", 0}, {"succeeded", 0}, {"failed", 0},
                                  {"lost", 0}};
  std::map<std::string, int> workers;
  for (auto& j : s.board.jobs) {
    ++jobs[j.state];
    for (auto& r : j.ranks)
      ++workers[r.state];
  }
  for (auto& [state, n] : jobs)
    e.sample("hvactor_jobs", fmt::format("state=\"{}\"", label(state)), n);
  e.family("hvactor_workers", "gauge", "Worker processes of the jobs the head knows, by state.");
  for (auto& [state, n] : workers)
    e.sample("hvactor_workers", fmt::format("state=\"{}\"", label(state)), n);
  e.family("hvactor_worker_cpu_seconds_total", "counter", "CPU time of a worker process.");
  for (auto& j : s.board.jobs)
    for (auto& r : j.ranks)
      e.sample("hvactor_worker_cpu_seconds_total",
               fmt::format("job=\"{}\",worker=\"{}\",node=\"{}\"", label(j.job_id), r.id,
                           label(r.node)),
               r.cpu_seconds);
  e.family("hvactor_worker_resident_memory_bytes", "gauge", "Resident memory of a worker process.");
  for (auto& j : s.board.jobs)
    for (auto& r : j.ranks)
      e.sample("hvactor_worker_resident_memory_bytes",
               fmt::format("job=\"{}\",worker=\"{}\",node=\"{}\"", label(j.job_id), r.id,
                           label(r.node)),
               static_cast<double>(r.rss_bytes));
  e.family("hvactor_elastic_resets_total", "counter", "Resets of an elastic job.");
  for (auto& j : s.board.jobs)
    if (j.generation >= 0)
      e.sample("hvactor_elastic_resets_total", fmt::format("job=\"{}\"", label(j.job_id)),
               j.resets);
  collective_families(e, s);
  e.family("hvactor_train_reports_total", "counter", "Reports of an hvactor::train run.");
  for (auto& r : s.board.runs)
    e.sample("hvactor_train_reports_total", fmt::format("run=\"{}\"", label(r.storage)),
             static_cast<double>(r.reports));
  e.family("hvactor_train_metric", "gauge", "The latest value of a run's reported metric.");
  for (auto& r : s.board.runs)
    if (!r.points.empty())
      for (auto& [name, v] : r.points.back().metrics)
        e.sample("hvactor_train_metric",
                 fmt::format("run=\"{}\",metric=\"{}\"", label(r.storage), label(name)), v);
  return e.out;
}

std::string plot_svg(const snapshot& s, size_t run, const std::string& metric) {
  if (run >= s.board.runs.size())
    return {};
  std::vector<std::pair<double, double>> xy;
  for (auto& p : s.board.runs[run].points)
    for (auto& [name, v] : p.metrics)
      if (name == metric && std::isfinite(v))
        xy.emplace_back(static_cast<double>(p.iteration), v);
  if (xy.empty())
    return {};
  constexpr double w = 480, h = 200, left = 60, right = 10, top = 10, bottom = 30;
  double x0 = xy.front().first, x1 = xy.back().first;
  auto [lo, hi] = std::minmax_element(xy.begin(), xy.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; });
  double y0 = lo->second, y1 = hi->second;
  if (x1 == x0)
    x1 = x0 + 1;
  if (y1 == y0)
    y1 = y0 + 1;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double y) { return top + (y1 - y) / (y1 - y0) * (h - top - bottom); };
  std::string points;
  for (auto& [x, y] : xy)
    points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
  // The name as XML text and attribute value: no markup of a user's.
  std::string safe;
  for (char c : metric)
    switch (c) {
      case '<': safe += "&lt;"; break;
      case '>': safe += "&gt;"; break;
      case '&': safe += "&amp;"; break;
      case '"': safe += "&quot;"; break;
      case '\'': safe += "&#39;"; break;
      default: safe += c;
    }
  return fmt::format(
    R"(<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-metric="{0}" data-points="{1}" )"
    R"(width="{2}" height="{3}" viewBox="0 0 {2} {3}">)"
    R"(<rect x="{4}" y="{5}" width="{6}" height="{7}" fill="none" stroke="#999"/>)"
    R"(<polyline class="series" fill="none" stroke="#1f77b4" stroke-width="2" points="{8}"/>)"
    R"(<text x="{4}" y="{9}" font-size="11">{10:.4g}</text>)"
    R"(<text x="{4}" y="{11}" font-size="11">{12:.4g}</text>)"
    R"(<text x="{13}" y="{14}" font-size="11" text-anchor="end">training_iteration {15:g}..{16:g}</text>)"
    R"(<text x="{17}" y="{9}" font-size="12" text-anchor="end">{0}</text></svg>)",
    safe, xy.size(), w, h, left, top, w - left - right, h - top - bottom, points, top + 12,
    y1, h - bottom - 2, y0, w - right, h - 8, x0, xy.back().first, w - right - 4);
}

} // namespace hvactor::dashboard
