#pragma once

// Internal: the knob files. Every environment variable and every timing
// constant of hvactor is named once, with the reason for its value, in the
// file of its topic; a source includes the topics it reads:
//   env_names.hpp          the environment variables (hvactor::env)
//   knobs_net.hpp          connections, heartbeats, cluster membership
//   knobs_jobs.hpp         worker processes, jobs, processes
//   knobs_collectives.hpp  the collectives' thresholds and waits
//   knobs_elastic.hpp      elastic jobs, host discovery
// scripts/gen_env_docs.py turns them into docs/reference/environment.md.

#include "base/internal/env_names.hpp"
#include "base/internal/knobs_net.hpp"
#include "base/internal/knobs_jobs.hpp"
#include "base/internal/knobs_collectives.hpp"
#include "base/internal/knobs_elastic.hpp"
