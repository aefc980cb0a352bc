// hvactor._hvactor's basics: init/shutdown, ranks and sizes, the timeline,
// the *_built() queries, process sets and the exception types.
#include <stdexcept>
#include <string>
#include <vector>

#include "hvactor/elastic.hpp"
#include "hvactor/errors.hpp"
#include "python/src/bindings.hpp"
#include "python/src/process_sets.hpp"

namespace hvactor::python {

hvd::process_set set_of(int id) {
  for (auto& ps : hvd::process_sets())
    if (ps.id() == id)
      return ps;
  throw std::invalid_argument("process set " + std::to_string(id) +
                              " is not a process set of this job (removed, or never added)");
}

on_set::on_set(int id) {
  if (id != 0)
    scope_.emplace(set_of(id));
}

namespace {

// init(process_sets=[...]): every set's ranks in, their ids out.
std::vector<int> init_with(const std::vector<std::vector<int>>& sets, bool dynamic) {
  if (sets.empty() && !dynamic) {
    hvd::init();
    return {};
  }
  std::vector<hvd::process_set> owned;
  owned.reserve(sets.size());
  for (const auto& ranks : sets)
    owned.emplace_back(ranks);
  std::vector<hvd::process_set*> ptrs;
  for (auto& ps : owned)
    ptrs.push_back(&ps);
  hvd::init(ptrs, dynamic);
  std::vector<int> ids;
  for (auto& ps : owned)
    ids.push_back(ps.id());
  return ids;
}

bool cuda_built() {
#ifdef HVACTOR_PYTHON_CUDA
  return true;
#else
  return false;
#endif
}

void bind_process_sets(py::module_& m) {
  m.def("add_process_set", [](std::vector<int> ranks) {
    py::gil_scoped_release unlocked;
    return hvd::add_process_set(std::move(ranks)).id();
  });
  m.def("remove_process_set", [](int id) {
    py::gil_scoped_release unlocked;
    if (id <= 0)
      return false;
    auto ps = set_of(id);
    return hvd::remove_process_set(ps);
  });
  m.def("process_set_ranks", [](int id) { return set_of(id).ranks(); });
  m.def("process_set_rank", [](int id) { return set_of(id).rank(); });
  m.def("process_set_included", [](int id) { return set_of(id).included(); });
  m.def("process_set_ids", [] {
    std::vector<int> ids;
    for (auto& ps : hvd::process_sets())
      ids.push_back(ps.id());
    return ids;
  });
}

void bind_errors(py::module_& m) {
  // horovod.common.exceptions.HorovodInternalError: a collective that
  // failed (a dead peer, mismatched tensors); a RuntimeError.
  static py::exception<hvactor::error> internal(m, "HorovodInternalError", PyExc_RuntimeError);
  // HostsUpdatedInterrupt(message, update): the elastic job's hosts
  // changed; args[1] is the update (1 removed, 2 added, 3 both).
  static py::exception<hvd::elastic::hosts_updated_interrupt> hosts(m, "HostsUpdatedInterrupt",
                                                                    PyExc_RuntimeError);
  // A function that failed on a worker (hvactor.Executor): its exception
  // and traceback in the message.
  static py::exception<hvactor::worker_error> worker(m, "WorkerError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const hvd::elastic::hosts_updated_interrupt& e) {
      py::tuple args = py::make_tuple(e.what(), static_cast<int>(e.update()));
      PyErr_SetObject(hosts.ptr(), args.ptr());
    } catch (const hvactor::worker_error& e) {
      worker(e.what());
    } catch (const hvactor::not_started& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const hvactor::error& e) {
      internal(e.what());
    }
  });
}

} // namespace

void bind_basics(py::module_& m) {
  bind_errors(m);
  m.def("init", &init_with, py::arg("process_sets"), py::arg("dynamic"),
        py::call_guard<py::gil_scoped_release>());
  m.def("shutdown", &hvd::shutdown, py::call_guard<py::gil_scoped_release>());
  m.def("is_initialized", &hvd::is_initialized);
  m.def("rank", &hvd::rank);
  m.def("size", &hvd::size);
  m.def("local_rank", &hvd::local_rank);
  m.def("local_size", &hvd::local_size);
  m.def("cross_rank", &hvd::cross_rank);
  m.def("cross_size", &hvd::cross_size);
  m.def("start_timeline", &hvd::start_timeline, py::arg("file_path"),
        py::arg("mark_cycles") = false);
  m.def("stop_timeline", &hvd::stop_timeline);
  m.def("backend_info", &hvd::backend_info);
  m.def("cuda_built", &cuda_built);
  m.def("gpu_available", &hvd::gpu_available);
  bind_process_sets(m);
}

} // namespace hvactor::python
