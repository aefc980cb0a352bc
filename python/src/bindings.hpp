#pragma once
// The extension module hvactor._hvactor: hvactor::hvd and its LibTorch
// adapter as Python calls, for hvactor.torch (horovod.torch's API, written
// in Python on top of these, as Horovod's mpi_ops.py sits on mpi_lib).
#include <torch/extension.h>

namespace hvactor::python {

namespace py = pybind11;

/// The basics: init/shutdown, ranks and sizes, timeline, what is built,
/// process sets, and the exception types.
void bind_basics(py::module_& m);

/// The collectives on tensors, their handles, join and barrier.
void bind_ops(py::module_& m);

/// The runtime and the executor (hvactor.Executor).
void bind_executor(py::module_& m);

/// hvactor::train for Python (hvactor.train).
void bind_trainer(py::module_& m);

/// The elastic loop and the base of its state (hvactor.torch.elastic).
void bind_elastic(py::module_& m);

} // namespace hvactor::python
