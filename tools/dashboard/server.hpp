#pragma once

// The head's dashboard (hvactor-node --head): a read-only web page, its JSON
// API and Prometheus' /metrics, from the head's registry (the nodes, and the
// jobs and training runs the drivers send it:
// actors/board/board_types.hpp). cpp-httplib (Debian's
// libcpp-httplib-dev) parses and routes the requests; the connections are
// front.hpp's, which bounds what each may cost before it is authenticated
// (a 16 KiB request head sent within 10 s, 256 connections).
//
//   GET /                  the page (page.hpp): nodes, jobs and their ranks,
//                          training runs with their metrics plotted; it
//                          polls /api/cluster every 2 s
//   GET /api/cluster       everything (render.hpp's to_json)
//   GET /api/nodes, /api/jobs, /api/runs
//   GET /api/plot?run=N&metric=NAME   a run's metric as an SVG chart
//   GET /metrics           Prometheus' text format
//
// Who may read it, as for every hvactor port:
//  - on a loopback address (the default, 127.0.0.1): processes of the
//    head's user only, by the kernel's owner of the peer's socket (as
//    port_guard does for CAF's ports); --insecure admits every local user;
//  - on any other address: only over TLS with the cluster's certificate
//    (--tls-cert/--tls-key/--tls-ca), and only a client presenting a
//    certificate of the cluster CA or the dashboard's token (`Authorization:
//    Bearer T`, `?token=T` once, which sets a cookie, or that cookie). The
//    token is random unless --dashboard-token sets it, and printed at start.
//    Without TLS the head refuses to start: never an unauthenticated port
//    off loopback, --insecure or not.

#include <cstdint>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>

#include "hvactor/tls.hpp"
#include "actors/protocol/interfaces.hpp"

namespace hvactor::dashboard {

struct options {
  std::string host = "127.0.0.1";
  int port = 8265;
  std::string token;
  tls::config tls;
  bool insecure = false;
  std::string head_id;
  int64_t head_started_ms = 0;
};

class server {
public:
  /// Listens at once; std::runtime_error naming the address when it cannot.
  server(caf::actor_system& sys, proto::node_registry registry, options o);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  uint16_t port() const;
  /// The address to open (with ?token= off loopback).
  std::string url() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace hvactor::dashboard
