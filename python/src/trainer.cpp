// hvactor._hvactor's trainer: hvactor::train (Ray Train's HorovodTrainer)
// for Python. The Python loop and its config travel pickled in the C++
// trainer's config (one text value); python_loop, the C++ loop every
// worker runs, hands them to hvactor.train._worker_loop. report(),
// get_checkpoint(), get_dataset_shard() and get_context() are the C++
// calls, with metrics as dicts and columns as torch tensors.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "hvactor/torch.hpp"
#include "hvactor/train.hpp"
#include "python/src/bindings.hpp"
#include "python/src/runtime_access.hpp"

namespace hvactor::python {

namespace {

namespace train = hvactor::train;
constexpr const char* loop_key = "__hvactor_python_loop__";

train::value value_of(const py::handle& v, const std::string& key) {
  if (py::isinstance<py::bool_>(v))
    return train::value(v.cast<bool>());
  if (py::isinstance<py::int_>(v))
    return train::value(v.cast<int64_t>());
  if (py::isinstance<py::float_>(v))
    return train::value(v.cast<double>());
  if (py::isinstance<py::str>(v))
    return train::value(v.cast<std::string>());
  if (THPVariable_Check(v.ptr()))
    return train::value_from(v.cast<torch::Tensor>(), train::value_tag{});
  if (py::hasattr(v, "item"))  // NumPy scalars
    return value_of(v.attr("item")(), key);
  throw std::invalid_argument("hvactor.train.report: metric '" + key + "' is a "
                              + py::str(v.get_type().attr("__name__")).cast<std::string>()
                              + "; metrics are numbers, strings or one-element tensors");
}

py::object python_value(const train::value& v) {
  if (v.is_int())
    return py::int_(v.as_int());
  if (v.is_double())
    return py::float_(v.as_double());
  return py::str(v.as_string());
}

py::dict as_dict(const train::metrics& m) {
  py::dict out;
  for (auto& [k, v] : m)
    out[py::str(k)] = python_value(v);
  return out;
}

void python_loop(train::context& ctx) {
  py::gil_scoped_acquire held;
  try {
    refresh_environ();
    auto payload = ctx.config().at(loop_key).as_string();
    py::module_::import("hvactor.train").attr("_worker_loop")(py::bytes(payload));
  } catch (py::error_already_set& e) {
    throw std::runtime_error(e.what());
  }
}

void report(const py::dict& metrics, const std::string& checkpoint_dir) {
  train::metrics m;
  for (auto& [k, v] : metrics)
    m[py::str(k).cast<std::string>()] = value_of(v, py::str(k).cast<std::string>());
  auto ckpt = checkpoint_dir.empty() ? train::checkpoint{}
                                     : train::checkpoint::from_directory(checkpoint_dir);
  py::gil_scoped_release unlocked;
  train::report(m, ckpt);
}

py::dict dataset_shard(const std::string& name) {
  const train::dataset* shard = nullptr;
  {
    py::gil_scoped_release unlocked;
    shard = &train::get_dataset_shard(name);
  }
  py::dict out;
  for (auto& [col, c] : shard->columns())
    out[py::str(col)] = train::column_to(c, std::type_identity<at::Tensor>{});
  return out;
}

py::dict context_dict() {
  auto& c = train::get_context();
  py::dict d;
  d["world_rank"] = c.world_rank();
  d["world_size"] = c.world_size();
  d["local_rank"] = c.local_rank();
  d["local_world_size"] = c.local_world_size();
  d["node_rank"] = c.node_rank();
  d["attempt"] = c.attempt();
  d["experiment_name"] = c.experiment_name();
  return d;
}

train::dataset dataset_of(const py::dict& columns) {
  std::map<std::string, train::column> cols;
  for (auto& [k, v] : columns)
    cols[py::str(k).cast<std::string>()] =
      train::column_from(v.cast<torch::Tensor>(), train::column_tag{});
  return train::dataset::from_tensors(std::move(cols));
}

train::trainer_options options_of(const py::dict& o) {
  train::trainer_options opts;
  opts.scaling.num_workers = o["num_workers"].cast<int>();
  opts.scaling.use_gpu = o["use_gpu"].cast<bool>();
  opts.scaling.cpus_per_worker = o["cpus_per_worker"].cast<int>();
  if (!o["gpus_per_worker"].is_none())
    opts.scaling.gpus_per_worker = o["gpus_per_worker"].cast<int>();
  opts.run.name = o["name"].cast<std::string>();
  opts.run.storage_path = o["storage_path"].cast<std::string>();
  opts.run.failure.max_failures = o["max_failures"].cast<int>();
  if (!o["num_to_keep"].is_none())
    opts.run.checkpoint.num_to_keep = o["num_to_keep"].cast<int>();
  opts.run.verbose = o["verbose"].cast<int>();
  if (!o["resume_from_checkpoint"].is_none())
    opts.resume_from_checkpoint =
      train::checkpoint::from_directory(o["resume_from_checkpoint"].cast<std::string>());
  for (auto& [name, cols] : o["datasets"].cast<py::dict>())
    opts.datasets[py::str(name).cast<std::string>()] = dataset_of(cols.cast<py::dict>());
  opts.config[loop_key] = train::value(o["loop"].cast<std::string>());
  return opts;
}

py::dict fit(const py::dict& o) {
  auto opts = options_of(o);
  train::result r;
  {
    py::gil_scoped_release unlocked;
    train::trainer t{runtime_of_process(), &python_loop, std::move(opts)};
    r = t.fit();
  }
  py::dict out;
  out["metrics"] = as_dict(r.metrics);
  out["checkpoint"] = r.checkpoint ? py::object(py::str(r.checkpoint.path())) : py::none();
  py::list history;
  for (auto& m : r.metrics_history)
    history.append(as_dict(m));
  out["metrics_history"] = history;
  out["error"] = r.error ? py::object(py::str(r.error_message())) : py::none();
  out["path"] = r.path;
  return out;
}

} // namespace

void bind_trainer(py::module_& m) {
  m.def("train_fit", &fit);
  m.def("train_report", &report, py::arg("metrics"), py::arg("checkpoint_dir"));
  m.def("train_get_checkpoint", [] {
    train::checkpoint c;
    {
      py::gil_scoped_release unlocked;
      c = train::get_checkpoint();
    }
    return c ? py::object(py::str(c.path())) : py::none();
  });
  m.def("train_dataset_shard", &dataset_shard);
  m.def("train_context", &context_dict);
}

} // namespace hvactor::python
