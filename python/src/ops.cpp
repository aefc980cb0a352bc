// hvactor._hvactor's collectives: the LibTorch adapter's async calls on
// the process set Python names, their handles, join and barrier. Blocking
// waits release the GIL, so other Python threads run meanwhile.
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hvactor/torch.hpp"
#include "python/src/bindings.hpp"
#include "python/src/process_sets.hpp"

namespace hvactor::python {

namespace {

// Horovod's ReduceOp values (horovod.torch.Average, Sum, ...).
hvd::op op_of(int code) {
  switch (code) {
    case 0: return hvd::op::average;
    case 1: return hvd::op::sum;
    case 2: return hvd::op::adasum;
    case 3: return hvd::op::min;
    case 4: return hvd::op::max;
    case 5: return hvd::op::product;
    default:
      throw std::invalid_argument("unknown reduction op " + std::to_string(code) +
                                  " (Average, Sum, Adasum, Min, Max or Product)");
  }
}

using in_place = std::shared_ptr<hvd::tensor_handle>;
using with_result = std::shared_ptr<hvd::tensor_result_handle>;

in_place allreduce_async_(torch::Tensor t, int op, std::string name, double pre, double post,
                          int set) {
  on_set scope{set};
  return std::make_shared<hvd::tensor_handle>(
    hvd::allreduce_async(t, op_of(op), std::move(name), {pre, post}));
}

// The synchronous call (hvd::allreduce on a tensor): the engine's
// small-call path, without an async handle's name and bookkeeping.
void allreduce_(torch::Tensor t, int op, double pre, double post, int set) {
  auto o = op_of(op);
  py::gil_scoped_release unlocked;
  on_set scope{set};
  hvd::allreduce(t, o, {pre, post});
}

void grouped_allreduce_(std::vector<torch::Tensor> ts, int op, double pre, double post, int set) {
  auto o = op_of(op);
  py::gil_scoped_release unlocked;
  on_set scope{set};
  hvd::grouped_allreduce(ts, o, {pre, post});
}

with_result allgather_async(const torch::Tensor& t, const std::string& name, int set) {
  on_set scope{set};
  return std::make_shared<hvd::tensor_result_handle>(hvd::allgather_async(t, name));
}

with_result broadcast_async(const torch::Tensor& t, int root, const std::string& name, int set) {
  on_set scope{set};
  return std::make_shared<hvd::tensor_result_handle>(hvd::broadcast_async(t, root, name));
}

with_result alltoall_async(const torch::Tensor& t, const std::vector<int64_t>& splits,
                           const std::string& name, int set) {
  on_set scope{set};
  return std::make_shared<hvd::tensor_result_handle>(hvd::alltoall_async(t, splits, name));
}

with_result reducescatter_async(const torch::Tensor& t, int op, const std::string& name,
                                double pre, double post, int set) {
  on_set scope{set};
  return std::make_shared<hvd::tensor_result_handle>(
    hvd::reducescatter_async(t, op_of(op), name, {pre, post}));
}

std::pair<torch::Tensor, std::vector<int64_t>> synchronize_result(hvd::tensor_result_handle& h) {
  py::gil_scoped_release unlocked;
  std::vector<int64_t> splits;
  auto out = hvd::synchronize(h, &splits);
  return {std::move(out), std::move(splits)};
}

void barrier(int set) {
  py::gil_scoped_release unlocked;
  on_set scope{set};
  hvd::barrier();
}

void bind_handles(py::module_& m) {
  py::class_<hvd::tensor_handle, in_place>(m, "InPlaceHandle")
    .def("ready", &hvd::tensor_handle::ready)
    .def_property_readonly("name", &hvd::tensor_handle::name);
  py::class_<hvd::tensor_result_handle, with_result>(m, "ResultHandle")
    .def("ready", &hvd::tensor_result_handle::ready)
    .def_property_readonly("name", &hvd::tensor_result_handle::name);
  m.def("synchronize_in_place", [](hvd::tensor_handle& h) { hvd::synchronize(h); },
        py::call_guard<py::gil_scoped_release>());
  m.def("synchronize_result", &synchronize_result);
}

} // namespace

void bind_ops(py::module_& m) {
  bind_handles(m);
  m.def("allreduce_async_", &allreduce_async_, py::arg("tensor"), py::arg("op"), py::arg("name"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set"));
  m.def("allreduce_", &allreduce_);
  m.def("grouped_allreduce_", &grouped_allreduce_);
  m.def("allgather_async", &allgather_async);
  m.def("broadcast_async", &broadcast_async);
  m.def("alltoall_async", &alltoall_async);
  m.def("reducescatter_async", &reducescatter_async);
  m.def("join", &hvd::join, py::call_guard<py::gil_scoped_release>());
  m.def("barrier", &barrier);
}

} // namespace hvactor::python
