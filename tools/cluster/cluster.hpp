#pragma once

// The cluster engines, one module (library hvactor_cluster, tools/cluster/):
// everything that brings hvactor-node processes up and decides when they
// are ready, whoever does it. The tools' mains parse their options and hand
// off to it.
//
// What it owns, one header each:
//   node_options.hpp    the hvactor-node command line, both ways: the options
//                       hvactor-node declares and reads (node_cli.cpp), the
//                       argv other programs build (node_command), the ready
//                       lines hvactor-node prints, where the binary is.
//   tls_layout.hpp      the TLS directory: DIR/ca.pem, DIR/NAME.pem and .key.
//   slurm_step.hpp      a node inside a Slurm step: id, CPUs, GPUs, work dir
//                       and identity from the step's environment.
//   slurm_launch.hpp    a launch inside a Slurm allocation: whether there is
//                       one (--launcher) and the ranks it implies. The
//                       allocation itself is parsed by
//                       runtime/internal/slurm.hpp (plain, unit-tested).
//   slurm_cluster.hpp   the cluster inside an allocation: the head beside
//                       hvactor-run, one srun step of nodes, tear-down;
//                       head_address.hpp picks the head's address.
//   readiness.hpp       ready means joined: ask the head which nodes it
//                       lists (registry_probe.hpp), every 200 ms, bounded.
//
// Who uses it:
//   hvactor-node        its options, --slurm / --tls-dir, status, wait, certs.
//   hvactor-run         Slurm mode (slurm_launch, slurm_cluster).
//   hvactor-up          the nodes' command lines over ssh, the per-cluster
//                       TLS directory, readiness.
//   Kubernetes          the nodes' init container runs `hvactor-node wait`
//                       (deploy/kubernetes/node-daemonset.yaml).
//   benchmarks/         local clusters: command lines and ready lines.

#include "tools/cluster/head_address.hpp"
#include "tools/cluster/node_options.hpp"
#include "tools/cluster/readiness.hpp"
#include "tools/cluster/registry_probe.hpp"
#include "tools/cluster/slurm_cluster.hpp"
#include "tools/cluster/slurm_launch.hpp"
#include "tools/cluster/slurm_step.hpp"
#include "tools/cluster/tls_layout.hpp"
