// hvactor._hvactor's elastic loop: hvd::elastic::state with its save,
// restore and sync written in Python (hvactor.torch.elastic's State), and
// run_loop around a Python function. A Python HorovodInternalError or
// HostsUpdatedInterrupt leaving the function becomes the C++ error the
// loop resets on.
#include <functional>
#include <stdexcept>
#include <string>

#include "hvactor/elastic.hpp"
#include <pybind11/functional.h>

#include "python/src/bindings.hpp"

namespace hvactor::python {

namespace {

namespace elastic = hvd::elastic;

// The extension module (it lives as long as the process).
py::handle module_handle;

// The function's Python errors that the loop handles, as their C++ kinds.
[[noreturn]] void rethrow_for_loop(py::error_already_set& e) {
  auto m = py::reinterpret_borrow<py::module_>(module_handle);
  if (e.matches(m.attr("HostsUpdatedInterrupt"))) {
    py::tuple args = e.value().attr("args");
    int update = args.size() > 1 ? args[1].cast<int>() : 3;
    throw elastic::hosts_updated_interrupt(static_cast<elastic::host_update>(update));
  }
  if (e.matches(m.attr("HorovodInternalError")))
    throw collective_error(py::str(e.value()).cast<std::string>());
  throw;
}

// Calls the Python override `name` of `self` (a State's save, restore or
// sync), its loop errors as C++ ones.
void call_override(const elastic::state* self, const char* name) {
  py::gil_scoped_acquire held;
  auto f = py::get_override(self, name);
  if (!f)
    throw std::logic_error(std::string{"hvactor.torch.elastic.State."} + name
                           + "() is not implemented");
  try {
    f();
  } catch (py::error_already_set& e) {
    rethrow_for_loop(e);
  }
}

class py_state : public elastic::state {
public:
  void restore() override {
    call_override(this, "restore");
  }
  void sync() override {
    call_override(this, "sync");
  }
  void save() override {
    call_override(this, "save");
  }
};

void run_loop(elastic::state& st, py::function fn) {
  auto attempt = [&] {
    py::gil_scoped_acquire held;
    try {
      fn();
    } catch (py::error_already_set& e) {
      rethrow_for_loop(e);
    }
  };
  py::gil_scoped_release unlocked;
  elastic::detail::run_loop(st, attempt);
}

} // namespace

void bind_elastic(py::module_& m) {
  module_handle = m;
  py::class_<elastic::state, py_state>(m, "ElasticState")
    .def(py::init<>())
    .def("commit", &elastic::state::commit, py::call_guard<py::gil_scoped_release>())
    .def("check_host_updates", &elastic::state::check_host_updates,
         py::call_guard<py::gil_scoped_release>())
    .def("register_reset_callback", &elastic::state::register_reset_callback)
    .def("on_reset", &elastic::state::on_reset);
  m.def("elastic_run_loop", &run_loop);
  m.def("elastic_generation", &elastic::generation);
}

} // namespace hvactor::python
