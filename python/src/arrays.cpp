// NumPy dtypes and braid dtypes.
#include "bindings.h"

#include "base/error.h"

namespace braid::python {

py::dtype numpy_dtype(DType dtype) {
    if (dtype == dtype::BFloat16())
        BRAID_THROW(ValueError, "dtype bfloat16 has no NumPy equivalent: convert the value to "
                                "float32 in the graph (astype) to read it from Python");
    return py::dtype(dtype.name());
}

DType braid_dtype(const py::dtype& dt, const std::string& what) {
    std::string name = py::str(dt.attr("name")).cast<std::string>();
    if (dt.attr("byteorder").cast<std::string>() == ">")
        BRAID_THROW(ValueError, "{}: a big-endian array (dtype >{}): braid takes native byte order",
                    what, name);
    try {
        return DType::from_name(name);
    } catch (const DTypeError&) {
        BRAID_THROW(ValueError,
                    "{}: NumPy dtype {} has no braid dtype (braid takes float32, float16, float64, "
                    "int8/16/32/64, uint8/16/32/64 and bool)",
                    what, name);
    }
}

} // namespace braid::python
