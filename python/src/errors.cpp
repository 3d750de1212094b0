// braid's errors as Python exceptions. Every class derives from braid.Error, which carries the
// embedding API's code name in `code`; the classes that mean a wrong argument also derive from
// Python's ValueError, the memory error from MemoryError, the deadline from TimeoutError, so
// that code catching the built-in classes keeps working.
#include "bindings.h"

#include "base/error.h"

namespace braid::python {

namespace {

//! The Python class of each embedding API code, set by bind_errors().
PyObject* g_by_code[9] = {};
PyObject *g_shape_error = nullptr, *g_dtype_error = nullptr, *g_graph_error = nullptr,
         *g_comm_error = nullptr, *g_comm_timeout_error = nullptr;

//! A new exception class braid.<name> deriving from `base1` (and `base2`), set on `m`.
PyObject* make_class(py::module_& m, const char* name, PyObject* base1, PyObject* base2,
                     const char* doc) {
    py::tuple bases = base2 ? py::make_tuple(py::handle(base1), py::handle(base2))
                            : py::make_tuple(py::handle(base1));
    py::object cls = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
        (std::string("braid.") + name).c_str(), doc, bases.ptr(), nullptr));
    if (!cls) throw py::error_already_set();
    m.attr(name) = cls;
    return cls.release().ptr(); // held for the life of the process, as the module holds it
}

PyObject* make_class(py::module_& m, const char* name, PyObject* base, const char* doc) {
    return make_class(m, name, base, nullptr, doc);
}

void raise(PyObject* cls, embed::Code code, const char* message) {
    py::object err = py::reinterpret_borrow<py::object>(cls)(message);
    err.attr("code") = embed::code_name(code);
    PyErr_SetObject(cls, err.ptr());
}

} // namespace

void bind_errors(py::module_& m) {
    using embed::Code;
    PyObject* base = make_class(m, "Error", PyExc_Exception,
                                "Every error braid raises; `code` names its kind "
                                "(\"INVALID_ARGUMENT\", \"CANCELLED\", ...).");
    PyObject* invalid = make_class(m, "InvalidArgumentError", base, PyExc_ValueError,
                                   "A wrong name, dtype, shape, size or value.");
    g_by_code[int(Code::INVALID_ARGUMENT)] = invalid;
    g_by_code[int(Code::NOT_FOUND)] = make_class(m, "NotFoundError", base, PyExc_FileNotFoundError,
                                                 "A file that is missing or unreadable.");
    g_by_code[int(Code::INVALID_MODEL)] = make_class(
        m, "InvalidModelError", base, "A model file that fails verification or cannot be built.");
    g_by_code[int(Code::FAILED_PRECONDITION)] =
        make_class(m, "FailedPreconditionError", base, "A call out of order.");
    g_by_code[int(Code::CANCELLED)] =
        make_class(m, "CancelledError", base, "The run's CancelToken was set.");
    g_by_code[int(Code::DEADLINE_EXCEEDED)] = make_class(
        m, "DeadlineExceededError", base, PyExc_TimeoutError, "The run passed its deadline.");
    g_by_code[int(Code::OUT_OF_MEMORY)] = make_class(m, "OutOfMemoryError", base, PyExc_MemoryError,
                                                     "The memory budget or the system ran out.");
    g_by_code[int(Code::INTERNAL)] = make_class(m, "InternalError", base, "A bug in braid.");
    g_shape_error = make_class(m, "ShapeError", invalid, "Shapes that do not fit an operator.");
    g_dtype_error = make_class(m, "DTypeError", invalid, "A dtype an operator does not take.");
    g_graph_error = make_class(m, "GraphError", base, "A graph that cannot be built or compiled.");
    g_comm_error = make_class(m, "CommError", base, "A collective or its group failed.");
    g_comm_timeout_error = make_class(m, "CommTimeoutError", g_comm_error, PyExc_TimeoutError,
                                      "A peer did not arrive before the deadline.");

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const embed::Error& e) {
            raise(g_by_code[int(e.code())], e.code(), e.what());
        } catch (const braid::ShapeError& e) {
            raise(g_shape_error, Code::INVALID_ARGUMENT, e.what());
        } catch (const braid::DTypeError& e) {
            raise(g_dtype_error, Code::INVALID_ARGUMENT, e.what());
        } catch (const braid::ValueError& e) {
            raise(g_by_code[int(Code::INVALID_ARGUMENT)], Code::INVALID_ARGUMENT, e.what());
        } catch (const braid::GraphError& e) {
            raise(g_graph_error, Code::INVALID_ARGUMENT, e.what());
        } catch (const braid::SerializationError& e) {
            raise(g_by_code[int(Code::INVALID_MODEL)], Code::INVALID_MODEL, e.what());
        } catch (const braid::TimeoutError& e) {
            raise(g_comm_timeout_error, Code::DEADLINE_EXCEEDED, e.what());
        } catch (const braid::CommError& e) {
            raise(g_comm_error, Code::INTERNAL, e.what());
        } catch (const braid::MemoryBudgetError& e) {
            raise(g_by_code[int(Code::OUT_OF_MEMORY)], Code::OUT_OF_MEMORY, e.what());
        } catch (const braid::CancelledError& e) {
            raise(g_by_code[int(Code::CANCELLED)], Code::CANCELLED, e.what());
        } catch (const braid::DeadlineExceededError& e) {
            raise(g_by_code[int(Code::DEADLINE_EXCEEDED)], Code::DEADLINE_EXCEEDED, e.what());
        } catch (const braid::Error& e) {
            raise(g_by_code[int(Code::INTERNAL)], Code::INTERNAL, e.what());
        }
    });
}

} // namespace braid::python
