// The head's dashboard data: what the registry keeps of jobs and training
// runs (job_board) and how it is rendered (JSON, Prometheus text, SVG).

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "actors/board/job_board.hpp"
#include "dashboard/page.hpp"
#include "dashboard/render.hpp"

using namespace hvactor;

namespace {

proto::job_view job(const std::string& id, const std::string& state) {
  proto::job_view v;
  v.job_id = id;
  v.state = state;
  v.size = 2;
  for (int r = 0; r < 2; ++r)
    v.ranks.push_back({r, r, "n" + std::to_string(r), 100 + r, "running", 1.5, 4096});
  v.ops.push_back({"allreduce", "shm", 10, 40960, 0.5});
  v.stalls = 1;
  return v;
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF), as Prometheus and JSON parsers require.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                                         : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      return false;
    auto c1 = n > 1 ? static_cast<unsigned char>(s[i + 1]) : 0x80;
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90)
        || (c == 0xF4 && c1 > 0x8F))
      return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return false;
    i += n;
  }
  return true;
}

proto::train_point point(const std::string& run, int64_t it, double loss) {
  proto::train_point p;
  p.job_id = "job-1";
  p.run = run;
  p.storage = "/runs/" + run;
  p.iteration = it;
  p.metrics = {{"loss", loss}, {"training_iteration", static_cast<double>(it)}};
  return p;
}

} // namespace

TEST_SUITE("dashboard") {

TEST_CASE("the board keeps every live job and the newest finished ones") {
  job_board b;
  b.update(job("live", "running"), 1);
  for (int i = 0; i < 120; ++i)
    b.update(job("done-" + std::to_string(i), "succeeded"), 2);
  auto s = b.snapshot();
  REQUIRE(s.jobs.size() == 1 + proto::board_limits::max_finished_jobs);
  CHECK(s.jobs.front().job_id == "done-119"); // newest first
  bool live = false;
  for (auto& j : s.jobs) {
    live = live || j.job_id == "live";
    CHECK(j.job_id != "done-0");
  }
  CHECK(live);
}

TEST_CASE("live jobs are bounded too: the oldest go first") {
  job_board b;
  for (size_t i = 0; i < proto::board_limits::max_jobs + 500; ++i)
    b.update(job("live-" + std::to_string(i), "running"), 1);
  auto s = b.snapshot();
  REQUIRE(s.jobs.size() == proto::board_limits::max_jobs);
  CHECK(s.jobs.front().job_id == "live-" + std::to_string(proto::board_limits::max_jobs + 499));
  CHECK(s.jobs.back().job_id == "live-500");
}

TEST_CASE("an ended job stays ended; a driver gone marks its live jobs lost") {
  job_board b;
  b.update(job("a", "running"), 7);
  b.update(job("b", "succeeded"), 7);
  b.update(job("b", "running"), 7); // a late update does not revive it
  b.update(job("a", "failed"), 8); // another driver cannot end (or rewrite) a job
  CHECK(b.knows(7));
  CHECK(b.driver_lost(7, 1234));
  CHECK_FALSE(b.knows(7));
  CHECK_FALSE(b.driver_lost(7, 1235));
  for (auto& j : b.snapshot().jobs) {
    if (j.job_id == "a") {
      CHECK(j.state == "lost");
      CHECK(j.ended_ms == 1234);
      REQUIRE(!j.failures.empty());
      CHECK(j.failures.back().find("driver went away") != std::string::npos);
    } else {
      CHECK(j.state == "succeeded");
    }
  }
}

TEST_CASE("a job's failures, log tail and lines are bounded") {
  job_board b;
  auto v = job("j", "running");
  for (int i = 0; i < 500; ++i) {
    v.failures.push_back(std::string(10000, 'f'));
    v.log_tail.push_back("line " + std::to_string(i) + std::string(5000, 'x'));
  }
  b.update(v, 1);
  auto got = b.snapshot().jobs.at(0);
  CHECK(got.failures.size() == proto::board_limits::max_failures);
  REQUIRE(got.log_tail.size() == proto::board_limits::log_lines);
  CHECK(got.log_tail.back().rfind("line 499", 0) == 0);
  CHECK(got.log_tail.back().size() == proto::board_limits::max_line);
}

TEST_CASE("a run's points are thinned by halves, the first and the latest kept") {
  job_board b;
  const int n = 10000;
  for (int i = 1; i <= n; ++i)
    b.report(point("r", i, 1.0 / i));
  auto runs = b.snapshot().runs;
  REQUIRE(runs.size() == 1);
  auto& r = runs[0];
  CHECK(r.reports == n);
  CHECK(r.points.size() <= proto::board_limits::max_points);
  CHECK(r.points.size() >= proto::board_limits::max_points / 2);
  CHECK(r.points.front().iteration == 1);
  CHECK(r.points.back().iteration == n);
  for (size_t i = 1; i < r.points.size(); ++i)
    CHECK(r.points[i - 1].iteration < r.points[i].iteration);
}

TEST_CASE("runs are told apart by storage and bounded in number and metrics") {
  job_board b;
  for (int i = 0; i < 80; ++i)
    b.report(point("r" + std::to_string(i), 1, 0.5));
  auto p = point("r79", 2, 0.25);
  p.job_id = "job-2"; // a retried attempt: same run, new job
  for (int m = 0; m < 500; ++m)
    p.metrics.emplace_back("m" + std::to_string(m), m);
  b.report(p);
  auto runs = b.snapshot().runs;
  CHECK(runs.size() == proto::board_limits::max_runs);
  CHECK(runs.front().run == "r79");
  CHECK(runs.front().job_id == "job-2");
  CHECK(runs.front().reports == 2);
  CHECK(runs.front().points.back().metrics.size() == proto::board_limits::max_metrics);
}

TEST_CASE("a run's experiment is its latest point's; the JSON and the page show it") {
  job_board b;
  auto p = point("trial_0", 1, 0.5);
  p.experiment = "old\xff"; // cut to well-formed UTF-8 as the run's name is
  b.report(p);
  auto first = b.snapshot().runs.at(0).experiment;
  CHECK(valid_utf8(first));
  CHECK(first.rfind("old\xef\xbf\xbd", 0) == 0);
  p = point("trial_0", 2, 0.25);
  p.experiment = "exp-a";
  b.report(p);
  b.report(point("plain", 1, 0.5));
  dashboard::snapshot s;
  s.board = b.snapshot();
  REQUIRE(s.board.runs.size() == 2);
  CHECK(s.board.runs[0].run == "plain"); // newest first
  CHECK(s.board.runs[0].experiment.empty());
  CHECK(s.board.runs[1].experiment == "exp-a");
  auto runs = dashboard::to_json(s, "runs");
  CHECK(runs.find(R"("run":"trial_0","storage":"/runs/trial_0","experiment":"exp-a",)")
        != std::string::npos);
  CHECK(runs.find(R"("run":"plain","storage":"/runs/plain","experiment":"",)")
        != std::string::npos);
  CHECK(dashboard::to_json(s).find(R"("experiment":"exp-a")") != std::string::npos);
  // The page groups by it: a box per experiment, its heading counting trials.
  std::string page = dashboard::page_html;
  CHECK(page.find("r.experiment") != std::string::npos);
  CHECK(page.find("dataset.experiment") != std::string::npos);
  CHECK(page.find("\"experiment-head\"") != std::string::npos);
  CHECK(page.find(" trials") != std::string::npos);
}

TEST_CASE("JSON escapes what a user named; NaN and infinity are null") {
  dashboard::snapshot s;
  proto::node_info n;
  n.node_id = "n\"1";
  n.total = {2, 0};
  s.view.nodes.push_back(n);
  auto j = job("job</script>\n", "running");
  j.failures.push_back("bad \"quote\" \\ and \x01 control");
  s.board.jobs.push_back(j);
  proto::train_run r;
  r.run = "run";
  auto p = point("run", 1, std::numeric_limits<double>::quiet_NaN());
  p.metrics.emplace_back("inf", std::numeric_limits<double>::infinity());
  r.points.push_back(p);
  s.board.runs.push_back(r);
  auto out = dashboard::to_json(s);
  CHECK(out.find(R"("node_id":"n\"1")") != std::string::npos);
  CHECK(out.find("\n") == std::string::npos);
  CHECK(out.find(R"(bad \"quote\" \\ and \u0001 control)") != std::string::npos);
  CHECK(out.find(R"("loss":null)") != std::string::npos);
  CHECK(out.find(R"("inf":null)") != std::string::npos);
  CHECK(out.find("nan") == std::string::npos);
  CHECK(dashboard::to_json(s, "nodes").front() == '[');
}

TEST_CASE("Prometheus text: families typed before samples, labels escaped") {
  dashboard::snapshot s;
  proto::node_info n;
  n.node_id = "a\"b\\c";
  n.total = {4, 1};
  n.free = {3, 1};
  s.view.nodes.push_back(n);
  s.board.jobs.push_back(job("j1", "running"));
  proto::train_run r;
  r.storage = "/runs/x";
  r.reports = 5;
  r.points.push_back(point("x", 5, 0.125));
  s.board.runs.push_back(r);
  auto text = dashboard::to_prometheus(s);
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed;
  std::regex sample(R"(([a-z_]+)(\{(([a-z]+="([^"\\]|\\.)*",?)*)\})? (-?[0-9.e+]+|NaN|[+-]Inf))");
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("#", 0) == 0)
      continue;
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_match(line, m, sample), line);
    CHECK_MESSAGE(typed.count(m[1]) == 1, line);
    ++samples;
  }
  CHECK(samples > 10);
  CHECK(text.find(R"(hvactor_node_cpus{node="a\"b\\c"} 4)") != std::string::npos);
  CHECK(text.find(R"(hvactor_jobs{state="running"} 1)") != std::string::npos);
  CHECK(text.find(R"(hvactor_workers{state="running"} 2)") != std::string::npos);
  CHECK(text.find(R"(hvactor_train_reports_total{run="/runs/x"} 5)") != std::string::npos);
  CHECK(text.find(R"(hvactor_collective_operations_total{job="j1",op="allreduce",path="shm"} 10)")
        != std::string::npos);
  CHECK(text.find(R"(hvactor_collective_bytes_total{job="j1",op="allreduce",path="shm"} 40960)")
        != std::string::npos);
  CHECK(text.find(R"(hvactor_negotiation_stalls_total{job="j1"} 1)") != std::string::npos);
  CHECK(text.find(R"(hvactor_train_metric{run="/runs/x",metric="loss"} 0.125)")
        != std::string::npos);
}

TEST_CASE("a metric plots as a polyline of its points; markup in names is escaped") {
  dashboard::snapshot s;
  proto::train_run r;
  for (int i = 1; i <= 5; ++i) {
    auto p = point("x", i, 1.0 / i);
    p.metrics.emplace_back("<b>&\"'", i);
    r.points.push_back(p);
  }
  s.board.runs.push_back(r);
  auto svg = dashboard::plot_svg(s, 0, "loss");
  REQUIRE(!svg.empty());
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, std::regex(R"re(<polyline[^>]* points="([^"]+)")re")));
  std::istringstream pts(m[1].str());
  std::string xy;
  int count = 0;
  double last_y = -1;
  while (pts >> xy) {
    auto y = std::stod(xy.substr(xy.find(',') + 1));
    CHECK(y > last_y); // the loss falls: each point lower on the chart
    last_y = y;
    ++count;
  }
  CHECK(count == 5);
  auto odd = dashboard::plot_svg(s, 0, "<b>&\"'");
  CHECK(odd.find("<b>") == std::string::npos);
  CHECK(odd.find("data-metric=\"&lt;b&gt;&amp;&quot;&#39;\"") != std::string::npos);
  CHECK(dashboard::plot_svg(s, 0, "missing").empty());
  CHECK(dashboard::plot_svg(s, 3, "loss").empty());
}

TEST_CASE("metric names not UTF-8 or past 512 bytes: /metrics and JSON valid, every series once") {
  job_board b;
  auto p = point("x", 1, 0.5);
  std::string cut_in_char = std::string(511, 'a') + "\xc3\xa9" + "tail"; // é across byte 512
  std::string long1 = std::string(600, 'b') + "1";
  std::string long2 = std::string(600, 'b') + "2"; // differs from long1 only after byte 512
  p.metrics = {{"bad\xff\xfe", 1}, {"bad\xfe\xff", 2}, {cut_in_char, 3}, {long1, 4},
               {long2, 5}, {"\xc3", 6}, {"\xed\xa0\x80surrogate", 7}, {"ok", 8}};
  p.run = "run\xff";
  p.storage = "/runs/\xc3(";
  b.report(p);
  dashboard::snapshot s;
  s.board = b.snapshot();
  proto::node_info n;
  n.node_id = "node\xff";
  s.view.nodes.push_back(n);
  auto j = job("job\xfe", "running");
  j.ranks[0].node = "n\xc0\xaf"; // an overlong '/'
  j.ops[0].path = "shm\xff";
  s.board.jobs.push_back(j);

  auto text = dashboard::to_prometheus(s);
  CHECK(valid_utf8(text));
  std::istringstream in(text);
  std::string line;
  std::set<std::string> series;
  int train_metrics = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    auto key = line.substr(0, line.rfind(' '));
    CHECK_MESSAGE(series.insert(key).second, "a duplicate series: " << key);
    train_metrics += key.rfind("hvactor_train_metric{", 0) == 0;
  }
  CHECK(train_metrics == 8);

  auto json = dashboard::to_json(s);
  CHECK(valid_utf8(json));
  auto& run = s.board.runs.at(0);
  std::set<std::string> names;
  for (auto& [name, v] : run.points.at(0).metrics) {
    CHECK(valid_utf8(name));
    CHECK(name.size() <= proto::board_limits::max_line);
    names.insert(name);
  }
  CHECK(names.size() == 8);
  CHECK(valid_utf8(run.run));
  CHECK(valid_utf8(run.storage));
}

TEST_CASE("board_text: UTF-8 cut between characters; distinct names stay distinct") {
  CHECK(board_text("loss", 512) == "loss");
  CHECK(board_text("loss", 512, true) == "loss");
  CHECK(board_text("a\xff", 512) == "a\xef\xbf\xbd");
  auto e = board_text(std::string(3, 'a') + "\xc3\xa9", 4); // é would straddle byte 4
  CHECK(e == "aaa");
  auto x = board_text("a\xff", 512, true), y = board_text("a\xfe", 512, true);
  CHECK(x != y);
  CHECK(x.rfind("a\xef\xbf\xbd~", 0) == 0);
  auto long1 = board_text(std::string(600, 'b') + "1", 512, true);
  auto long2 = board_text(std::string(600, 'b') + "2", 512, true);
  CHECK(long1 != long2);
  CHECK(long1.size() <= 512);
  CHECK(long1.rfind(std::string(400, 'b'), 0) == 0);
  auto wide = board_text(std::string(300, '\xce') /* not UTF-8 */ + std::string(400, 'c'), 512,
                         true); // each byte grows to 3: the cut still lands on a boundary
  CHECK(wide.size() <= 512);
  CHECK(valid_utf8(wide));
  CHECK(board_text(std::string(100000, 'z'), 512).size() == 512);
}

} // TEST_SUITE
