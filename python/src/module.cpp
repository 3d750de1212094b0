#include "bindings.h"

PYBIND11_MODULE(_braid, m) {
    m.doc() = "braid's C++ core (see the braid package)";
    braid::python::bind_errors(m);
    braid::python::bind_inference(m);
    braid::python::bind_graph(m);
    braid::python::bind_collectives(m);
}
