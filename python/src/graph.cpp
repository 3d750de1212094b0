// Graphs from Python: braid.Graph builds a computing graph; braid.Var is one of its vars, with
// Python's operators and the operator library as functions (registered on braid.ops); a
// compiled braid.Function runs it on NumPy arrays. Shapes are inferred statically as vars are
// made (Var.shape before running). grad and minimize insert the backward pass and the
// optimizer's updates; dump writes a model file braid.Model loads.
#include "bindings.h"

#include "braid.h"

#include <fmt/format.h>

#include <cstring>
#include <optional>

namespace braid::python {

namespace {

struct Graph {
    std::shared_ptr<ComputingGraph> graph;
};

Graph make_graph(const std::optional<std::string>& comp_node, bool deterministic) {
    GraphOptions options;
    if (comp_node) options.default_comp_node = *comp_node;
    options.deterministic = options.deterministic || deterministic;
    return Graph{ComputingGraph::make(options)};
}

//! A host tensor holding a copy of `value` (any array-like), as `dtype` when given.
Tensor tensor_of(const py::handle& value, const std::string& what,
                 std::optional<DType> dtype = std::nullopt) {
    py::array arr = py::array::ensure(value, py::array::c_style);
    if (!arr) BRAID_THROW(ValueError, "{}: the value cannot be read as an array", what);
    if (dtype && braid_dtype(arr.dtype(), what) != *dtype)
        arr = py::array::ensure(arr.attr("astype")(numpy_dtype(*dtype)), py::array::c_style);
    TensorShape shape(std::vector<size_t>(arr.shape(), arr.shape() + arr.ndim()));
    Tensor t(shape, braid_dtype(arr.dtype(), what));
    if (arr.nbytes()) std::memcpy(t.raw_ptr(), arr.data(), size_t(arr.nbytes()));
    return t;
}

py::array array_of(const Tensor& t) {
    Tensor c = t.contiguous();
    std::vector<py::ssize_t> shape;
    for (size_t i = 0; i < c.shape().ndim(); ++i) shape.push_back(py::ssize_t(c.shape()[i]));
    py::array out(numpy_dtype(c.dtype()), shape);
    if (c.nr_bytes()) std::memcpy(out.mutable_data(), c.raw_ptr(), c.nr_bytes());
    return out;
}

//! `other` as a var of `like`'s graph: a var, or a constant (a Python number takes like's dtype).
SymbolVar operand(const Var& like, const py::handle& other) {
    if (py::isinstance<Var>(other)) {
        auto& v = other.cast<const Var&>();
        if (v.graph != like.graph)
            BRAID_THROW(GraphError, "var \"{}\" and var \"{}\" belong to different graphs",
                        like.var.name(), v.var.name());
        return v.var;
    }
    if (py::isinstance<py::float_>(other) || py::isinstance<py::int_>(other) ||
        py::isinstance<py::bool_>(other))
        return opr::scalar_like(like.var, other.cast<double>());
    return opr::ImmutableTensor::make(*like.graph, tensor_of(other, "a constant operand"));
}

py::tuple shape_tuple(const SymbolVar& v) {
    if (!v.node()->shape_known()) return py::tuple();
    const auto& s = v.shape();
    py::tuple t(s.ndim());
    for (size_t i = 0; i < s.ndim(); ++i) t[i] = s[i];
    return t;
}

std::vector<int> axes_of(const py::object& axis) {
    if (axis.is_none()) return {};
    if (py::isinstance<py::int_>(axis)) return {axis.cast<int>()};
    return axis.cast<std::vector<int>>();
}

SymbolVarArray vars_of(const std::vector<Var>& vars) {
    SymbolVarArray out;
    for (auto& v : vars) out.push_back(v.var);
    return out;
}

const Var& first(const std::vector<Var>& vars, const char* what) {
    if (vars.empty()) BRAID_THROW(ValueError, "{}: no vars given", what);
    return vars.front();
}

//! A compiled graph.
class Function {
public:
    Function(std::shared_ptr<ComputingGraph> graph, const std::vector<Var>& outputs)
        : m_graph(std::move(graph)) {
        std::vector<OutputSpec> specs;
        for (auto& v : outputs) {
            if (v.graph != m_graph)
                BRAID_THROW(GraphError, "Graph.compile: var \"{}\" belongs to another graph",
                            v.var.name());
            specs.emplace_back(v.var);
        }
        m_exec = m_graph->compile(specs);
    }

    //! Feeds `feeds`, runs, returns the outputs in the order given to compile.
    std::vector<py::array> run(const py::dict& feeds) {
        for (auto [k, v] : feeds) {
            std::string name = py::str(k);
            m_exec->feed(name, tensor_of(v, "input \"" + name + "\""));
        }
        {
            py::gil_scoped_release unlocked;
            m_exec->run();
        }
        std::vector<py::array> out;
        for (size_t i = 0; i < m_exec->nr_outputs(); ++i)
            out.push_back(array_of(m_exec->output(i)));
        return out;
    }

private:
    std::shared_ptr<ComputingGraph> m_graph;
    std::unique_ptr<Executable> m_exec;
};

using Unary = SymbolVar (*)(SymbolVar);
using Binary = SymbolVar (*)(SymbolVar, SymbolVar);

void def_unary(py::module_& ops, const char* name, Unary f, const char* doc) {
    ops.def(
        name, [f](const Var& x) { return wrap(x, f(x.var)); }, py::arg("x"), doc);
}

void def_binary(py::module_& ops, const char* name, Binary f, const char* doc) {
    ops.def(
        name, [f](const Var& a, const py::object& b) { return wrap(a, f(a.var, operand(a, b))); },
        py::arg("a"), py::arg("b"), doc);
}

} // namespace

Var wrap(const Var& like, SymbolVar v) {
    return {like.graph, v};
}

void bind_graph(py::module_& m) {
    register_all_operators();

    py::class_<Var>(m, "Var", "A var of a braid.Graph: an operator's output, shape inferred.")
        .def_property_readonly(
            "shape", [](const Var& v) { return shape_tuple(v.var); },
            "The static shape (inferred when the var is made).")
        .def_property_readonly("dtype", [](const Var& v) { return numpy_dtype(v.var.dtype()); })
        .def_property_readonly("name", [](const Var& v) { return v.var.name(); })
        .def_property_readonly("ndim", [](const Var& v) { return v.var.shape().ndim(); })
        .def("rename", [](const Var& v, const std::string& n) { return wrap(v, v.var.rename(n)); })
        .def("reshape",
             [](const Var& v, py::args shape) {
                 std::vector<long> dims;
                 if (shape.size() == 1 && !py::isinstance<py::int_>(shape[0]))
                     dims = shape[0].cast<std::vector<long>>();
                 else
                     dims = shape.cast<std::vector<long>>();
                 return wrap(v, v.var.reshape(dims));
             })
        .def("astype",
             [](const Var& v, const py::object& dt) {
                 return wrap(v, v.var.astype(braid_dtype(py::dtype::from_args(dt), "astype")));
             })
        .def("transpose",
             [](const Var& v, py::args perm) {
                 return wrap(v, opr::transpose(v.var, perm.cast<std::vector<int>>()));
             })
        .def_property_readonly("T", [](const Var& v) { return wrap(v, opr::transpose(v.var)); })
        .def(
            "sum",
            [](const Var& v, const py::object& axis, bool keepdims) {
                return wrap(v, opr::reduce_sum(v.var, axes_of(axis), keepdims));
            },
            py::arg("axis") = py::none(), py::arg("keepdims") = false)
        .def(
            "mean",
            [](const Var& v, const py::object& axis, bool keepdims) {
                return wrap(v, opr::reduce_mean(v.var, axes_of(axis), keepdims));
            },
            py::arg("axis") = py::none(), py::arg("keepdims") = false)
        .def(
            "numpy",
            [](const Var& v) {
                auto* p = dynamic_cast<opr::SharedParam*>(v.var.node()->owner());
                if (!p)
                    BRAID_THROW(ValueError,
                                "Var.numpy: var \"{}\" is not a parameter (Graph.param); run a "
                                "compiled Function to read other vars",
                                v.var.name());
                return array_of(*p->param());
            },
            "A parameter's current value (after the training steps run so far).")
        .def("__add__", [](const Var& a, py::object b) { return wrap(a, a.var + operand(a, b)); })
        .def("__radd__", [](const Var& a, py::object b) { return wrap(a, operand(a, b) + a.var); })
        .def("__sub__", [](const Var& a, py::object b) { return wrap(a, a.var - operand(a, b)); })
        .def("__rsub__", [](const Var& a, py::object b) { return wrap(a, operand(a, b) - a.var); })
        .def("__mul__", [](const Var& a, py::object b) { return wrap(a, a.var * operand(a, b)); })
        .def("__rmul__", [](const Var& a, py::object b) { return wrap(a, operand(a, b) * a.var); })
        .def(
            "__truediv__",
            [](const Var& a, py::object b) { return wrap(a, opr::true_div(a.var, operand(a, b))); })
        .def(
            "__rtruediv__",
            [](const Var& a, py::object b) { return wrap(a, opr::true_div(operand(a, b), a.var)); })
        .def("__pow__",
             [](const Var& a, py::object b) { return wrap(a, opr::pow(a.var, operand(a, b))); })
        .def("__matmul__",
             [](const Var& a, py::object b) { return wrap(a, opr::matmul(a.var, operand(a, b))); })
        .def("__rmatmul__",
             [](const Var& a, py::object b) { return wrap(a, opr::matmul(operand(a, b), a.var)); })
        .def("__neg__", [](const Var& a) { return wrap(a, opr::neg(a.var)); })
        .def("__lt__",
             [](const Var& a, py::object b) { return wrap(a, opr::less(a.var, operand(a, b))); })
        .def("__le__", [](const Var& a,
                          py::object b) { return wrap(a, opr::less_equal(a.var, operand(a, b))); })
        .def("__gt__",
             [](const Var& a, py::object b) { return wrap(a, opr::less(operand(a, b), a.var)); })
        .def("__ge__", [](const Var& a,
                          py::object b) { return wrap(a, opr::less_equal(operand(a, b), a.var)); })
        .def("__repr__", [](const Var& v) {
            return py::str("Var({!r}, shape={}, dtype={})")
                .format(v.var.name(), shape_tuple(v.var), v.var.dtype().name());
        });

    py::class_<Function>(m, "Function", "A compiled graph: call it with its inputs as keywords.")
        .def("run", &Function::run, py::arg("feeds"),
             "Feeds {name: array}, runs, returns the outputs (a list, in compile's order).")
        .def("__call__", [](Function& f, py::kwargs feeds) { return f.run(feeds); });

    py::class_<Graph>(m, "Graph", "A computing graph built from Python.")
        .def(py::init(&make_graph), py::kw_only(), py::arg("comp_node") = py::none(),
             py::arg("deterministic") = false,
             "comp_node: where its operators run (\"cpu0\", \"cpu:default\", \"cuda0\"; a "
             "Group's comp_node for a rank that runs collectives). deterministic: see "
             "docs/determinism.md.")
        .def_property_readonly("comp_node",
                               [](const Graph& g) { return g.graph->options().default_comp_node; })
        .def(
            "input",
            [](Graph& g, const std::string& name, const std::vector<size_t>& shape,
               const py::object& dt) {
                TensorShape s(shape);
                return Var{g.graph,
                           opr::Input::make(*g.graph, name,
                                            braid_dtype(py::dtype::from_args(dt), name), s)};
            },
            py::arg("name"), py::arg("shape"), py::arg("dtype") = "float32",
            "A named input, fed when the compiled Function runs.")
        .def(
            "param",
            [](Graph& g, const py::object& value, const std::optional<std::string>& name) {
                auto t = std::make_shared<Tensor>(tensor_of(value, "Graph.param"));
                OperatorConfig config;
                if (name) config.name = *name;
                return Var{g.graph, opr::SharedParam::make(*g.graph, t, config)};
            },
            py::arg("value"), py::arg("name") = py::none(),
            "A parameter holding a copy of `value`; minimize updates it in place.")
        .def(
            "const",
            [](Graph& g, const py::object& value) {
                return Var{g.graph,
                           opr::ImmutableTensor::make(*g.graph, tensor_of(value, "Graph.const"))};
            },
            py::arg("value"), "A constant holding a copy of `value`.")
        .def(
            "compile",
            [](Graph& g, const std::vector<Var>& outputs) {
                return std::make_unique<Function>(g.graph, outputs);
            },
            py::arg("outputs"), "Compiles the graph for `outputs` (shape inference, memory plan).");

    m.def(
        "grad",
        [](const Var& loss, const std::vector<Var>& wrt) {
            std::vector<Var> out;
            for (auto& g : grad(loss.var, vars_of(wrt))) out.push_back(wrap(loss, g));
            return out;
        },
        py::arg("loss"), py::arg("wrt"), "d loss / d wrt[i] for each var of `wrt`, as vars.");
    py::class_<opr::OptimizerConfig>(m, "Optimizer",
                                     "An update rule and its hyper-parameters (braid.SGD, "
                                     "braid.Adam).")
        .def_readonly("lr", &opr::OptimizerConfig::lr)
        .def_property_readonly("kind",
                               [](const opr::OptimizerConfig& c) {
                                   return std::string(opr::optimizer_kind_name(c.kind));
                               })
        .def("__repr__", [](const opr::OptimizerConfig& c) {
            return fmt::format("Optimizer({}, lr={})", opr::optimizer_kind_name(c.kind), c.lr);
        });
    m.def(
        "SGD",
        [](float lr, float momentum, float weight_decay) {
            opr::OptimizerConfig c;
            c.lr = lr;
            c.momentum = momentum;
            c.weight_decay = weight_decay;
            return c;
        },
        py::arg("lr") = 0.01f, py::arg("momentum") = 0.f, py::arg("weight_decay") = 0.f,
        "SGD: v = momentum * v + g (+ weight_decay * p); p -= lr * v.");
    m.def(
        "Adam",
        [](float lr, float beta1, float beta2, float eps, float weight_decay) {
            opr::OptimizerConfig c;
            c.kind = opr::OptimizerKind::ADAM;
            c.lr = lr;
            c.beta1 = beta1;
            c.beta2 = beta2;
            c.eps = eps;
            c.weight_decay = weight_decay;
            return c;
        },
        py::arg("lr") = 0.001f, py::arg("beta1") = 0.9f, py::arg("beta2") = 0.999f,
        py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.f, "Adam.");
    m.def(
        "minimize",
        [](const Var& loss, const std::vector<Var>& params, const opr::OptimizerConfig& c) {
            std::vector<Var> out;
            for (auto& u : opr::minimize(loss.var, vars_of(params), c))
                out.push_back(wrap(loss, u));
            return out;
        },
        py::arg("loss"), py::arg("params"), py::arg("optimizer"),
        "The update vars of `params` (Graph.param vars) that lower `loss`: compile them with "
        "the loss, and each run takes one step.");
    m.def(
        "apply_gradients",
        [](const std::vector<Var>& params, const std::vector<Var>& grads,
           const opr::OptimizerConfig& c, const std::vector<Var>& after) {
            if (params.size() != grads.size())
                BRAID_THROW(ValueError, "apply_gradients: {} params but {} gradients",
                            params.size(), grads.size());
            std::vector<Var> out;
            for (size_t i = 0; i < params.size(); ++i)
                out.push_back(wrap(params[i], opr::ParamUpdate::make(
                                                  params[i].var, grads[i].var, vars_of(after), c,
                                                  OperatorConfig::on(params[i].var.comp_node()))));
            return out;
        },
        py::arg("params"), py::arg("grads"), py::arg("optimizer"),
        py::arg("after") = std::vector<Var>{},
        "One update var per parameter from the given gradients (for example all-reduced over "
        "data-parallel ranks); `after`: vars the updates wait for (the loss).");
    m.def(
        "dump",
        [](const std::string& path, const std::vector<Var>& outputs) {
            first(outputs, "dump");
            dump(vars_of(outputs), path);
        },
        py::arg("path"), py::arg("outputs"),
        "Writes the graph of `outputs` as a model file (load it with braid.Model).");

    py::module_ ops = m.def_submodule("ops", "braid's operators as functions of vars.");
    def_unary(ops, "relu", opr::relu, "max(x, 0)");
    def_unary(ops, "gelu", opr::gelu, "x * Phi(x) (the erf form)");
    def_unary(ops, "gelu_tanh", opr::gelu_tanh, "GELU, the tanh approximation");
    def_unary(ops, "silu", opr::silu, "x * sigmoid(x)");
    def_unary(ops, "sigmoid", opr::sigmoid, "1 / (1 + exp(-x))");
    def_unary(ops, "tanh", opr::tanh, "tanh(x)");
    def_unary(ops, "exp", opr::exp, "e ** x");
    def_unary(ops, "log", opr::log, "natural logarithm");
    def_unary(ops, "sqrt", opr::sqrt, "square root");
    def_unary(ops, "abs", opr::abs, "|x|");
    def_unary(ops, "square", opr::square, "x * x");
    def_unary(ops, "neg", opr::neg, "-x");
    def_binary(ops, "maximum", opr::maximum, "elementwise max (broadcasting)");
    def_binary(ops, "minimum", opr::minimum, "elementwise min (broadcasting)");
    ops.def(
        "matmul",
        [](const Var& a, const py::object& b, bool ta, bool tb) {
            return wrap(a, opr::matmul(a.var, operand(a, b), ta, tb));
        },
        py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false,
        "a @ b, either transposed first.");
    ops.def(
        "softmax", [](const Var& x, int axis) { return wrap(x, opr::softmax(x.var, axis)); },
        py::arg("x"), py::arg("axis") = -1);
    ops.def(
        "log_softmax",
        [](const Var& x, int axis) { return wrap(x, opr::log_softmax(x.var, axis)); }, py::arg("x"),
        py::arg("axis") = -1);
    for (auto [name, f] : {std::pair{"reduce_sum", &opr::reduce_sum},
                           {"reduce_mean", &opr::reduce_mean},
                           {"reduce_max", &opr::reduce_max},
                           {"reduce_min", &opr::reduce_min}})
        ops.def(
            name,
            [f](const Var& x, const py::object& axis, bool keepdims) {
                return wrap(x, f(x.var, axes_of(axis), keepdims));
            },
            py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false);
    ops.def(
        "argmax",
        [](const Var& x, int axis, bool keepdims) {
            return wrap(x, opr::argmax(x.var, axis, keepdims));
        },
        py::arg("x"), py::arg("axis") = -1, py::arg("keepdims") = false);
    ops.def(
        "concat",
        [](const std::vector<Var>& xs, int axis) {
            return wrap(first(xs, "concat"), opr::concat(vars_of(xs), axis));
        },
        py::arg("xs"), py::arg("axis") = 0);
    ops.def(
        "transpose",
        [](const Var& x, const std::optional<std::vector<int>>& perm) {
            return wrap(x, opr::transpose(x.var, perm.value_or(std::vector<int>{})));
        },
        py::arg("x"), py::arg("perm") = py::none());
    ops.def(
        "where",
        [](const Var& cond, const py::object& a, const py::object& b) {
            return wrap(cond, opr::where(cond.var, operand(cond, a), operand(cond, b)));
        },
        py::arg("cond"), py::arg("a"), py::arg("b"));
    ops.def(
        "clip",
        [](const Var& x, double lo, double hi) { return wrap(x, opr::clip(x.var, lo, hi)); },
        py::arg("x"), py::arg("lo"), py::arg("hi"));
    ops.def(
        "layer_norm",
        [](const Var& x, const std::optional<Var>& w, const std::optional<Var>& b, float eps) {
            return wrap(x, opr::layer_norm(x.var, w ? w->var : SymbolVar{},
                                           b ? b->var : SymbolVar{}, 1, eps));
        },
        py::arg("x"), py::arg("weight") = py::none(), py::arg("bias") = py::none(),
        py::arg("eps") = 1e-5f, "Normalizes over the last dim.");
    ops.def(
        "conv2d",
        [](const Var& x, const Var& w, int stride, int padding, int dilation, int groups) {
            return wrap(x, opr::conv2d(x.var, w.var, stride, padding, dilation, groups));
        },
        py::arg("x"), py::arg("w"), py::arg("stride") = 1, py::arg("padding") = 0,
        py::arg("dilation") = 1, py::arg("groups") = 1, "NCHW convolution with OIHW weights.");
    ops.def(
        "max_pool2d",
        [](const Var& x, int window, std::optional<int> stride, int padding) {
            return wrap(x, opr::max_pool2d(x.var, window, stride.value_or(window), padding));
        },
        py::arg("x"), py::arg("window"), py::arg("stride") = py::none(), py::arg("padding") = 0);
}

} // namespace braid::python
