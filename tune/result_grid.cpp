// hvactor::tune's results: the best trial, the errors, the table.

#include <ostream>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "base/internal/log.hpp"
#include "hvactor/errors.hpp"
#include "tune/internal/experiment.hpp"
#include "tune/internal/space.hpp"
#include "tune/internal/table.hpp"
#include "tune/internal/tuner_state.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace hvactor::tune {

// -- results -----------------------------------------------------------------------

const result& result_grid::get_best_result(std::string metric, std::string mode,
                                           const std::string& scope) const {
  if (metric.empty())
    metric = metric_;
  if (mode.empty())
    mode = mode_;
  if (metric.empty() || mode.empty())
    throw std::invalid_argument("get_best_result: no metric and mode: pass them, or set "
                                "tune_config.metric and tune_config.mode");
  if (mode != "min" && mode != "max")
    throw std::invalid_argument(
      fmt::format("get_best_result: mode must be 'min' or 'max': Got '{}'.", mode));
  if (scope != "last" && scope != "all")
    throw std::invalid_argument(
      fmt::format("get_best_result: scope must be 'last' or 'all': Got '{}'.", scope));
  const result* best = nullptr;
  double best_score = 0;
  std::set<std::string> names;
  for (auto& r : results_) {
    auto consider = [&](const metrics& m) {
      for (auto& [k, v] : m)
        names.insert(k);
      auto i = m.find(metric);
      if (i == m.end() || i->second.is_string() || std::isnan(i->second.as_double()))
        return;
      auto x = mode == "max" ? i->second.as_double() : -i->second.as_double();
      if (!best || x > best_score) {
        best = &r;
        best_score = x;
      }
    };
    if (scope == "last")
      consider(r.metrics);
    else
      for (auto& m : r.metrics_history)
        consider(m);
  }
  if (!best) {
    std::string list;
    for (auto& n : names)
      list += (list.empty() ? "" : ", ") + n;
    throw std::invalid_argument(
      fmt::format("get_best_result: no trial reported the metric '{}'; the results hold: {}",
                  metric, list.empty() ? "nothing" : list));
  }
  return *best;
}

size_t result_grid::num_errors() const {
  return static_cast<size_t>(std::count_if(results_.begin(), results_.end(), [](auto& r) {
    return r.status == trial_status::error;
  }));
}

size_t result_grid::num_terminated() const {
  return static_cast<size_t>(std::count_if(results_.begin(), results_.end(), [](auto& r) {
    return r.status == trial_status::terminated;
  }));
}

std::vector<std::string> result_grid::errors() const {
  std::vector<std::string> out;
  for (auto& r : results_)
    if (r.status == trial_status::error)
      out.push_back(r.trial_id + ": " + r.error);
  return out;
}

std::string result_grid::table() const {
  // The config entries that differ between trials (Ray's table leaves
  // the constants out).
  std::set<std::string> cols;
  for (auto& r : results_)
    for (auto& [k, v] : r.config)
      if (!cols.count(k))
        for (auto& other : results_)
          if (auto i = other.config.find(k); i == other.config.end() || !(i->second == v)) {
            cols.insert(k);
            break;
          }
  std::vector<std::string> head{"Trial name", "status"};
  for (auto& c : cols)
    head.push_back("config/" + c);
  head.push_back("iter");
  if (!metric_.empty())
    head.push_back(metric_);
  head.push_back("error");
  std::vector<std::vector<std::string>> rows;
  for (auto& r : results_) {
    std::vector<std::string> row{r.trial_id, to_string(r.status)};
    for (auto& c : cols) {
      auto i = r.config.find(c);
      row.push_back(i == r.config.end() ? "" : i->second.to_string());
    }
    auto get = [&](const std::string& k) {
      auto i = r.metrics.find(k);
      return i == r.metrics.end() ? std::string{} : i->second.to_string();
    };
    row.push_back(get("training_iteration"));
    if (!metric_.empty())
      row.push_back(get(metric_));
    row.push_back(r.error.size() > 60 ? r.error.substr(0, 57) + "..." : r.error);
    rows.push_back(std::move(row));
  }
  return format_table(head, rows);
}

std::ostream& operator<<(std::ostream& out, const result_grid& g) {
  return out << g.table();
}

} // namespace hvactor::tune
