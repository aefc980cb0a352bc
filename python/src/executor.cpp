// hvactor._hvactor's executor: the process's runtime and hvactor::executor
// for Python (hvactor.Executor, horovod.ray's RayExecutor). A Python
// function travels pickled (hvactor/executor.py) as the argument of one C++
// function, python_call, which every worker runs: the worker is this same
// interpreter re-running the driver's script (DESIGN.md, "Shipping user
// code"), whose runtime constructor turned it into a worker before the
// script went further, with the GIL released.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

#include <pybind11/stl.h>

#include "hvactor/code_registry.hpp"
#include "hvactor/executor.hpp"
#include "hvactor/runtime.hpp"
#include "python/src/bindings.hpp"
#include "python/src/runtime_access.hpp"

namespace hvactor::python {

namespace {

std::unique_ptr<runtime>& the_runtime() {
  static auto* rt = new std::unique_ptr<runtime>; // outlives the interpreter's exit
  return *rt;
}

} // namespace

runtime& runtime_of_process() {
  if (!the_runtime())
    throw std::logic_error("hvactor.init() must come first");
  return *the_runtime();
}

void refresh_environ() {
  auto environ_py = py::module_::import("os").attr("environ");
  for (char** e = ::environ; e && *e; ++e) {
    std::string kv{*e};
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      continue;
    auto key = kv.substr(0, eq);
    if (key.rfind("HOROVOD_", 0) == 0 || key.rfind("HVACTOR_", 0) == 0
        || key == "CUDA_VISIBLE_DEVICES")
      environ_py[py::str(key)] = py::str(kv.substr(eq + 1));
  }
}

namespace {

// Runs in every worker: hvactor.executor._worker_call(payload) unpickles
// the function and its arguments, calls it and pickles the result; a Python
// exception becomes the call's error, with its traceback.
std::string python_call(std::string payload) {
  py::gil_scoped_acquire held;
  try {
    refresh_environ();
    auto call = py::module_::import("hvactor.executor").attr("_worker_call");
    return call(py::bytes(payload)).cast<std::string>();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(e.what());
  }
}

void init_runtime(std::vector<std::string> argv, const std::string& address, int num_cpus) {
  if (the_runtime())
    return;
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(a.data());
  runtime_options opts;
  opts.address = address;
  opts.num_cpus = num_cpus;
  // A worker never comes back from here; the GIL stays released for the
  // calls it serves.
  py::gil_scoped_release unlocked;
  the_runtime() = std::make_unique<runtime>(static_cast<int>(args.size()), args.data(), opts);
}

struct py_executor {
  std::unique_ptr<executor> ex;
};

std::shared_ptr<py_executor> make_executor(const py::dict& s, const py::dict& o) {
  if (!the_runtime())
    throw std::logic_error("hvactor.init() must come first");
  settings st;
  if (s.contains("timeout_s"))
    st.timeout = std::chrono::milliseconds(static_cast<int64_t>(s["timeout_s"].cast<double>() * 1000));
  if (s.contains("placement_group_timeout_s"))
    st.placement_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(s["placement_group_timeout_s"].cast<double>() * 1000));
  executor_options opts;
  auto opt_int = [&](const char* k, std::optional<int>& out) {
    if (o.contains(k) && !o[k].is_none())
      out = o[k].cast<int>();
  };
  opt_int("num_workers", opts.num_workers);
  opt_int("num_hosts", opts.num_hosts);
  opt_int("num_workers_per_host", opts.num_workers_per_host);
  opt_int("gpus_per_worker", opts.gpus_per_worker);
  opt_int("min_workers", opts.min_workers);
  opt_int("max_workers", opts.max_workers);
  opt_int("reset_limit", opts.reset_limit);
  if (o.contains("cpus_per_worker"))
    opts.cpus_per_worker = o["cpus_per_worker"].cast<int>();
  if (o.contains("use_gpu"))
    opts.use_gpu = o["use_gpu"].cast<bool>();
  if (o.contains("env"))
    opts.extra_env_vars = o["env"].cast<std::map<std::string, std::string>>();
  auto out = std::make_shared<py_executor>();
  out->ex = std::make_unique<executor>(*the_runtime(), st, opts);
  return out;
}

std::vector<py::bytes> as_bytes(std::vector<std::string> v) {
  std::vector<py::bytes> out;
  for (auto& s : v)
    out.emplace_back(s);
  return out;
}

// The file of hvactor's base library, whose accept() (the port guard) and
// SSL_read must come before libc's and libssl's (base/net/transport.cpp).
std::string base_library() {
  Dl_info where{};
  if (::dladdr(reinterpret_cast<const void*>(&hvactor::detail::encode_code_address), &where) == 0
      || where.dli_fname == nullptr)
    return {};
  return where.dli_fname;
}

// Whether this process's accept() is the port guard's.
bool accept_guarded() {
  Dl_info where{};
  return ::dladdr(::dlsym(RTLD_DEFAULT, "accept"), &where) != 0 && where.dli_fname != nullptr
         && std::string{where.dli_fname}.find("hvactor_base") != std::string::npos;
}

} // namespace

void bind_executor(py::module_& m) {
  m.def("base_library", &base_library);
  m.def("accept_guarded", &accept_guarded);
  m.def("init_runtime", &init_runtime, py::arg("argv"), py::arg("address"), py::arg("num_cpus"));
  m.def("runtime_started", [] { return the_runtime() != nullptr; });
  using fut = future<std::string>;
  py::class_<fut, std::shared_ptr<fut>>(m, "CallFuture")
    .def("ready", &fut::ready)
    .def("get", [](fut& f) {
      std::string s;
      {
        py::gil_scoped_release unlocked;
        s = f.get();
      }
      return py::bytes(s);
    });
  py::class_<py_executor, std::shared_ptr<py_executor>>(m, "CppExecutor")
    .def(py::init(&make_executor))
    .def("start", [](py_executor& e) { e.ex->start(); }, py::call_guard<py::gil_scoped_release>())
    .def("run", [](py_executor& e, std::string payload) {
      std::vector<std::string> out;
      {
        py::gil_scoped_release unlocked;
        out = e.ex->run(&python_call, std::move(payload));
      }
      return as_bytes(std::move(out));
    })
    .def("run_remote", [](py_executor& e, std::string payload) {
      std::vector<std::shared_ptr<fut>> out;
      py::gil_scoped_release unlocked;
      for (auto& f : e.ex->run_remote(&python_call, std::move(payload)))
        out.push_back(std::make_shared<fut>(std::move(f)));
      return out;
    })
    .def("num_workers", [](py_executor& e) { return e.ex->num_workers(); })
    .def("worker_pids", [](py_executor& e) { return e.ex->worker_pids(); })
    .def("shutdown", [](py_executor& e) { e.ex->shutdown(); },
         py::call_guard<py::gil_scoped_release>());
}

} // namespace hvactor::python
