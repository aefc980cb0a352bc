#pragma once

// The head's dashboard, what it serves (render.cpp): the cluster as JSON,
// as Prometheus' text format and a training metric as an SVG line chart.
// Pure functions of a snapshot, so that tests check them without a server.

#include <cstdint>
#include <string>

#include "actors/protocol/interfaces.hpp"

namespace hvactor::dashboard {

/// What one page load shows: the registry's nodes and board, the head.
struct snapshot {
  proto::cluster_view view;
  proto::board board;
  std::string head_id;
  int64_t head_started_ms = 0;
  int64_t now_ms = 0;
};

/// {"head":..,"totals":..,"nodes":[..],"jobs":[..],"runs":[..]}; `part`
/// "nodes", "jobs" or "runs" renders only that array.
std::string to_json(const snapshot& s, const std::string& part = {});

/// Prometheus' text exposition format (version 0.0.4).
std::string to_prometheus(const snapshot& s);

/// Run `run` (index into board.runs)'s metric `metric` against its
/// training_iteration as an SVG line chart; empty when there is no such
/// run or metric.
std::string plot_svg(const snapshot& s, size_t run, const std::string& metric);

} // namespace hvactor::dashboard
