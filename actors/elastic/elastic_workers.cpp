#include "actors/elastic/elastic_workers.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace hvactor::elastic {

worker_record& worker_registry::at(int64_t id) {
  auto i = workers_.find(id);
  if (i == workers_.end())
    throw std::logic_error(fmt::format("elastic worker registry: no worker {}", id));
  return i->second;
}

int64_t worker_registry::add(const std::string& host) {
  auto id = next_id_++;
  workers_[id] = worker_record{id, host, worker_phase::starting, holding::asked};
  return id;
}

give_back worker_registry::reserved(int64_t id) {
  auto& w = at(id);
  if (w.held != holding::asked)
    return give_back::none;
  if (w.phase == worker_phase::gone) {
    w.held = holding::nothing;
    return give_back::release_reservation;
  }
  w.held = holding::reservation;
  return give_back::none;
}

void worker_registry::reserve_failed(int64_t id) {
  auto& w = at(id);
  if (w.held == holding::asked)
    w.held = holding::nothing;
}

give_back worker_registry::colocated(int64_t id) {
  auto& w = at(id);
  // Its reservation may have been released already (the worker went away
  // while its colocator was starting): the colocator still has to stop.
  if (w.phase == worker_phase::gone) {
    w.held = holding::stopping;
    return give_back::stop_colocator;
  }
  w.held = holding::colocator;
  return give_back::none;
}

void worker_registry::registered(int64_t id) {
  auto& w = at(id);
  if (w.phase == worker_phase::starting)
    w.phase = worker_phase::running;
}

void worker_registry::leave(int64_t id) {
  auto& w = at(id);
  if (w.phase != worker_phase::gone)
    w.phase = worker_phase::leaving;
}

give_back worker_registry::gone(int64_t id) {
  auto& w = at(id);
  if (w.phase == worker_phase::gone)
    return give_back::none;
  w.phase = worker_phase::gone;
  switch (w.held) {
    case holding::colocator:
      w.held = holding::stopping;
      return give_back::stop_colocator;
    case holding::reservation:
      w.held = holding::nothing;
      return give_back::release_reservation;
    case holding::asked:    // reserved() releases it when it arrives
    case holding::stopping: // already told
    case holding::nothing:
      return give_back::none;
  }
  return give_back::none;
}

void worker_registry::colocator_stopped(int64_t id) {
  auto& w = at(id);
  if (w.held == holding::stopping || w.held == holding::colocator)
    w.held = holding::nothing;
}

const worker_record* worker_registry::find(int64_t id) const {
  auto i = workers_.find(id);
  return i == workers_.end() ? nullptr : &i->second;
}

bool worker_registry::is_gone(int64_t id) const {
  auto* w = find(id);
  return w == nullptr || w->phase == worker_phase::gone;
}

std::vector<int64_t> worker_registry::live() const {
  std::vector<int64_t> out;
  for (auto& [id, w] : workers_)
    if (w.phase == worker_phase::starting || w.phase == worker_phase::running)
      out.push_back(id);
  return out;
}

std::vector<int64_t> worker_registry::leaked() const {
  std::vector<int64_t> out;
  for (auto& [id, w] : workers_)
    if (w.phase == worker_phase::gone
        && (w.held == holding::reservation || w.held == holding::colocator))
      out.push_back(id);
  return out;
}

} // namespace hvactor::elastic
