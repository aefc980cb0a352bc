#include "python/src/bindings.hpp"

PYBIND11_MODULE(_hvactor, m) {
  m.doc() = "hvactor's collectives for PyTorch (the extension behind hvactor.torch)";
  hvactor::python::bind_basics(m);
  hvactor::python::bind_ops(m);
  hvactor::python::bind_elastic(m);
  hvactor::python::bind_executor(m);
  hvactor::python::bind_trainer(m);
}
