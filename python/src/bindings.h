// The pieces of braid's Python module (_braid): each file binds one part of the API.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <braid/embed.h>

#include "graph/computing_graph.h"
#include "graph/symbol_var.h"
#include "memory/dtype.h"

namespace braid::python {

namespace py = pybind11;

//! braid.Error and its subclasses, and the translation of braid's C++ errors into them.
void bind_errors(py::module_& m);
//! braid.Model, braid.Context, braid.CancelToken: the embedding API.
void bind_inference(py::module_& m);
//! braid.Graph, braid.Var, braid.Function, the operators, grad and minimize.
void bind_graph(py::module_& m);
//! braid.Group and the collectives among ranks (braid.ops.all_reduce, ...).
void bind_collectives(py::module_& m);

//! A var and the graph that owns it (kept alive while Python holds the var).
struct Var {
    std::shared_ptr<ComputingGraph> graph;
    SymbolVar var;
};
//! `v`, of `like`'s graph, as a Var.
Var wrap(const Var& like, SymbolVar v);

//! The NumPy dtype of a braid dtype; throws InvalidArgument for one NumPy lacks (bfloat16).
py::dtype numpy_dtype(DType dtype);
//! The braid dtype of a NumPy dtype; throws InvalidArgument (naming `what`) for one braid lacks.
DType braid_dtype(const py::dtype& dtype, const std::string& what);

} // namespace braid::python
