#pragma once

/// Everything a user of hvactor needs.

#include "hvactor/errors.hpp"
#include "hvactor/event.hpp"
#include "hvactor/executor.hpp"
#include "hvactor/future.hpp"
#include "hvactor/horovod_runner.hpp"
#include "hvactor/discovery.hpp"
#include "hvactor/elastic.hpp"
#include "hvactor/elastic_sampler.hpp"
#include "hvactor/hvd.hpp"
#include "hvactor/hvd_objects.hpp"
#include "hvactor/runtime.hpp"
#include "hvactor/settings.hpp"
#include "hvactor/train.hpp"
