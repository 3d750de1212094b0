#include "operators/det.h"

#include "graph/operator_registry.h"
#include "graph/param_fields.h"
#include "operators/kernel_utils.h"

#include <cmath>
#include <utility>
#include <vector>

namespace braid::opr {

Det::Det(VarNode* x, const OperatorConfig& config) : OperatorNode(config) {
    add_input(x);
    add_output();
}

SymbolVar Det::make(SymbolVar x, const OperatorConfig& config) {
    return x.graph().insert_opr(std::make_unique<Det>(x.node(), config))->output(0);
}

SymbolVar det(SymbolVar x) {
    return Det::make(x);
}

void Det::init_output_dtypes() {
    DType dt = input(0)->dtype();
    if (!dt.is_float())
        BRAID_THROW(
            DTypeError, "{}: input \"{}\" has dtype {}; expected {}", describe(), input(0)->name(),
            dt.name(),
            dtype_list({dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Float64()}));
    output(0)->set_dtype(dt);
}

bool Det::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    const TensorShape* x = ctx.shape(0);
    if (!x) return false;
    if (x->ndim() < 2)
        BRAID_THROW(ShapeError, "{}: input \"{}\" has shape {}; expected [..., M, M] (rank >= 2)",
                    describe(), input(0)->name(), x->to_string());
    size_t nd = x->ndim();
    if ((*x)[nd - 1] != (*x)[nd - 2])
        BRAID_THROW(ShapeError, "{}: input \"{}\" has shape {}: its matrices are {}x{}, not square",
                    describe(), input(0)->name(), x->to_string(), (*x)[nd - 2], (*x)[nd - 1]);
    std::vector<size_t> dims;
    for (size_t i = 0; i + 2 < nd; ++i) dims.push_back((*x)[i]);
    out[0] = TensorShape(dims);
    return true;
}

namespace {

//! The determinant of the m x m row-major matrix `a` (overwritten by its LU factors):
//! Gaussian elimination with partial pivoting.
double lu_det(double* a, size_t m) {
    double det = 1;
    for (size_t k = 0; k < m; ++k) {
        size_t pivot = k;
        for (size_t i = k + 1; i < m; ++i)
            if (std::fabs(a[i * m + k]) > std::fabs(a[pivot * m + k])) pivot = i;
        if (a[pivot * m + k] == 0) return 0;
        if (pivot != k) {
            for (size_t j = 0; j < m; ++j) std::swap(a[k * m + j], a[pivot * m + j]);
            det = -det;
        }
        double p = a[k * m + k];
        det *= p;
        for (size_t i = k + 1; i < m; ++i) {
            double f = a[i * m + k] / p;
            if (f == 0) continue;
            for (size_t j = k + 1; j < m; ++j) a[i * m + j] -= f * a[k * m + j];
        }
    }
    return det;
}

} // namespace

void Det::execute(ExecCtx& ctx) {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    size_t nd = x.shape().ndim(), m = x.shape()[nd - 1];
    size_t count = y.shape().total_nr_elems(), mm = m * m;
    if (count == 0) return;
    // The kernel's inputs and outputs are contiguous: convert whole buffers. The double copy
    // is the kernel's own, so each matrix is factored in place.
    std::vector<double> a(count * mm), dst(count);
    convert_elements(x.dtype(), x.raw_ptr(), dtype::Float64(), a.data(), a.size());
    parallel_range(count, mm * m, [&](size_t begin, size_t end) {
        for (size_t b = begin; b < end; ++b) dst[b] = lu_det(a.data() + b * mm, m);
    });
    convert_elements(dtype::Float64(), dst.data(), y.dtype(), y.raw_ptr(), count); // one rounding
}

namespace {

// The determinants of the 2x2 blocks of a {6,2,2} view of x.
SymbolVarArray det_example(SymbolVar x) {
    return {det(x.reshape(std::vector<long>{-1, 2, 2}))};
}

} // namespace

void register_det_operators() {
    OperatorRegistry::instance().add("Det", "det", no_params, load_param<Det>, det_example);
}

} // namespace braid::opr
