// Element data types: name, size in bytes, and conversions between them.
//
// float16 and bfloat16 are storage types: kernels compute them in float32 and
// convert with round-to-nearest-even on store.
//
// float64 is a compute type of its own: a kernel that accepts it computes in double and never
// stages it through float32. DType::is_float() is true for it, so every operator that asks
// is_float() either has a double kernel (elemwise, reductions, cumsum, scatter/index adds,
// matmul) or rejects float64 with a DTypeError that names the operator and the dtypes it
// takes (convolution, pooling, normalization, softmax, attention, batch norm). No CUDA
// kernel takes float64: compiling a graph with a float64 var on a CUDA comp node fails.
//
// int16, uint16 and uint32 are storage types for arithmetic: a graph computes them in int32 or
// int64 and converts back (the ONNX importer does so, wrapping as ONNX does). uint64 has
// elementwise kernels of its own (no wider type holds it).
//
// DTypeEnum values are stored in model files and exposed through the embedding API: new
// dtypes are appended, existing values never move.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid {

//! The element types a tensor may hold.
enum class DTypeEnum : uint8_t {
    FLOAT32,
    FLOAT16,
    BFLOAT16,
    INT8,
    UINT8,
    INT32,
    INT64,
    BOOL,
    FLOAT64, //!< IEEE binary64, computed in double
    INT16,
    UINT16,
    UINT32,
    UINT64,
};

//! A tensor element type (a small value type; cheap to copy, thread-safe).
class DType {
public:
    constexpr DType() = default;
    constexpr DType(DTypeEnum e) : m_enum(e), m_valid(true) {}

    //! Whether this dtype was set (a default-constructed DType is invalid).
    constexpr bool valid() const { return m_valid; }
    constexpr DTypeEnum enumv() const { return m_enum; }
    //! Size of one element in bytes.
    size_t size() const;
    //! Lower-case name: "float32", "bfloat16", "bool", ...
    const char* name() const;
    //! float32, float16, bfloat16 and float64.
    bool is_float() const;
    //! Signed or unsigned integer types (bool excluded).
    bool is_integer() const;
    //! float16 and bfloat16: stored in 16 bits, reduced and computed in float32.
    constexpr bool is_half() const {
        return m_valid && (m_enum == DTypeEnum::FLOAT16 || m_enum == DTypeEnum::BFLOAT16);
    }

    //! Parses a name as printed by name(); throws DTypeError for unknown names.
    static DType from_name(const std::string& name);

    constexpr bool operator==(const DType& rhs) const {
        return m_valid == rhs.m_valid && (!m_valid || m_enum == rhs.m_enum);
    }

private:
    DTypeEnum m_enum = DTypeEnum::FLOAT32;
    bool m_valid = false;
};

namespace dtype {
constexpr DType Float32() {
    return DTypeEnum::FLOAT32;
}
constexpr DType Float16() {
    return DTypeEnum::FLOAT16;
}
constexpr DType BFloat16() {
    return DTypeEnum::BFLOAT16;
}
constexpr DType Int8() {
    return DTypeEnum::INT8;
}
constexpr DType Uint8() {
    return DTypeEnum::UINT8;
}
constexpr DType Int32() {
    return DTypeEnum::INT32;
}
constexpr DType Int64() {
    return DTypeEnum::INT64;
}
constexpr DType Bool() {
    return DTypeEnum::BOOL;
}
constexpr DType Float64() {
    return DTypeEnum::FLOAT64;
}
constexpr DType Int16() {
    return DTypeEnum::INT16;
}
constexpr DType Uint16() {
    return DTypeEnum::UINT16;
}
constexpr DType Uint32() {
    return DTypeEnum::UINT32;
}
constexpr DType Uint64() {
    return DTypeEnum::UINT64;
}
} // namespace dtype

//! IEEE binary16 bits to float.
float half_to_float(uint16_t h);
//! float to IEEE binary16 bits, round to nearest even, overflow to infinity, NaN kept.
uint16_t float_to_half(float f);
//! bfloat16 bits to float.
inline float bf16_to_float(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
//! float to bfloat16 bits, round to nearest even, NaN kept quiet.
uint16_t float_to_bf16(float f);

//! Reads element `i` of a buffer of dtype `dt` as a double.
double load_as_double(DType dt, const void* base, size_t i);
//! Writes `v` into element `i` of a buffer of dtype `dt` with that dtype's conversion rules
//! (float16/bfloat16 rounding, integer truncation toward zero, bool as v != 0).
void store_from_double(DType dt, void* base, size_t i, double v);
//! Converts `n` contiguous elements from `src_dt` to `dst_dt`, rounding once: exact where the
//! target holds the value (every float32/float16/bfloat16/int32 value in float64, every integer
//! in an integer type that holds it), else to nearest even for floats (int64, uint64 and float64
//! to narrower floats included) and toward zero with saturation for integers (NaN becomes 0;
//! an integer out of the target's range becomes its nearest bound).
void convert_elements(DType src_dt, const void* src, DType dst_dt, void* dst, size_t n);

} // namespace braid
