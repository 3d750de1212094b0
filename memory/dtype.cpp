#include "memory/dtype.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace braid {

size_t DType::size() const {
    switch (m_enum) {
    case DTypeEnum::FLOAT32:
        return 4;
    case DTypeEnum::FLOAT16:
        return 2;
    case DTypeEnum::BFLOAT16:
        return 2;
    case DTypeEnum::INT8:
        return 1;
    case DTypeEnum::UINT8:
        return 1;
    case DTypeEnum::INT32:
        return 4;
    case DTypeEnum::INT64:
        return 8;
    case DTypeEnum::BOOL:
        return 1;
    case DTypeEnum::FLOAT64:
        return 8;
    case DTypeEnum::INT16:
    case DTypeEnum::UINT16:
        return 2;
    case DTypeEnum::UINT32:
        return 4;
    case DTypeEnum::UINT64:
        return 8;
    }
    return 0;
}

const char* DType::name() const {
    if (!m_valid) return "invalid";
    switch (m_enum) {
    case DTypeEnum::FLOAT32:
        return "float32";
    case DTypeEnum::FLOAT16:
        return "float16";
    case DTypeEnum::BFLOAT16:
        return "bfloat16";
    case DTypeEnum::INT8:
        return "int8";
    case DTypeEnum::UINT8:
        return "uint8";
    case DTypeEnum::INT32:
        return "int32";
    case DTypeEnum::INT64:
        return "int64";
    case DTypeEnum::BOOL:
        return "bool";
    case DTypeEnum::FLOAT64:
        return "float64";
    case DTypeEnum::INT16:
        return "int16";
    case DTypeEnum::UINT16:
        return "uint16";
    case DTypeEnum::UINT32:
        return "uint32";
    case DTypeEnum::UINT64:
        return "uint64";
    }
    return "invalid";
}

bool DType::is_float() const {
    return m_valid && (m_enum == DTypeEnum::FLOAT32 || m_enum == DTypeEnum::FLOAT16 ||
                       m_enum == DTypeEnum::BFLOAT16 || m_enum == DTypeEnum::FLOAT64);
}

bool DType::is_integer() const {
    return m_valid && (m_enum == DTypeEnum::INT8 || m_enum == DTypeEnum::UINT8 ||
                       m_enum == DTypeEnum::INT16 || m_enum == DTypeEnum::UINT16 ||
                       m_enum == DTypeEnum::INT32 || m_enum == DTypeEnum::UINT32 ||
                       m_enum == DTypeEnum::INT64 || m_enum == DTypeEnum::UINT64);
}

DType DType::from_name(const std::string& name) {
    for (auto e :
         {DTypeEnum::FLOAT32, DTypeEnum::FLOAT16, DTypeEnum::BFLOAT16, DTypeEnum::INT8,
          DTypeEnum::UINT8, DTypeEnum::INT32, DTypeEnum::INT64, DTypeEnum::BOOL, DTypeEnum::FLOAT64,
          DTypeEnum::INT16, DTypeEnum::UINT16, DTypeEnum::UINT32, DTypeEnum::UINT64}) {
        if (name == DType(e).name()) return e;
    }
    BRAID_THROW(DTypeError, "unknown dtype name \"{}\"", name);
}

float half_to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint16_t sign = uint16_t((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) // inf or NaN
        return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0);
    if (absx >= 0x477ff000u) // rounds to >= 65520: overflow
        return sign | 0x7c00;
    if (absx < 0x38800000u) { // below the smallest normal half: subnormal or zero
        // Add 0.5 (as float) so the hardware rounds the mantissa to nearest even for us.
        float a;
        std::memcpy(&a, &absx, 4);
        a += 0.5f;
        uint32_t r;
        std::memcpy(&r, &a, 4);
        return sign | uint16_t(r - 0x3f000000u);
    }
    uint32_t mant_odd = (absx >> 13) & 1;
    absx += 0xc8000fffu + mant_odd; // rebias exponent (-112 << 23) and round to nearest even
    return sign | uint16_t(absx >> 13);
}

uint16_t float_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40); // quiet NaN
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fffu + lsb;
    return uint16_t(x >> 16);
}

double load_as_double(DType dt, const void* base, size_t i) {
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return static_cast<const float*>(base)[i];
    case DTypeEnum::FLOAT16:
        return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DTypeEnum::BFLOAT16:
        return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DTypeEnum::INT8:
        return static_cast<const int8_t*>(base)[i];
    case DTypeEnum::UINT8:
        return static_cast<const uint8_t*>(base)[i];
    case DTypeEnum::INT32:
        return static_cast<const int32_t*>(base)[i];
    case DTypeEnum::INT64:
        return double(static_cast<const int64_t*>(base)[i]);
    case DTypeEnum::BOOL:
        return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
    case DTypeEnum::FLOAT64:
        return static_cast<const double*>(base)[i];
    case DTypeEnum::INT16:
        return static_cast<const int16_t*>(base)[i];
    case DTypeEnum::UINT16:
        return static_cast<const uint16_t*>(base)[i];
    case DTypeEnum::UINT32:
        return static_cast<const uint32_t*>(base)[i];
    case DTypeEnum::UINT64:
        return double(static_cast<const uint64_t*>(base)[i]);
    }
    return 0;
}

namespace {
template <typename T> T saturate_int(double v) {
    if (std::isnan(v)) return 0;
    v = std::trunc(v);
    if (v <= double(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(v);
}
} // namespace

namespace {
//! `v` rounded (to nearest even) to `bits` significant bits, for |v| in the normal range of
//! float. Rounding a double straight to float16/bfloat16 through float would round twice:
//! an int32 such as 2^24 + 2^16 + 1 first becomes the tie 2^24 + 2^16, then rounds down.
double round_to_bits(double v, int bits) {
    if (!std::isfinite(v) || std::fabs(v) < 1.17549435e-38) return v;
    uint64_t u;
    std::memcpy(&u, &v, 8);
    int drop = 53 - bits;
    uint64_t lsb = (u >> drop) & 1;
    u += (uint64_t(1) << (drop - 1)) - 1 + lsb;
    u &= ~((uint64_t(1) << drop) - 1);
    std::memcpy(&v, &u, 8);
    return v;
}

//! `v` rounded (to nearest even) to a multiple of 2^`exp`; for the subnormal range of a
//! narrow float, whose spacing is fixed. Scaling by a power of two is exact, and the result,
//! a small integer times 2^exp, is exact in float, so the later conversions do not round.
double round_to_quantum(double v, int exp) {
    return std::ldexp(std::nearbyint(std::ldexp(v, -exp)), exp);
}
} // namespace

namespace {
//! Element `i` of an integer buffer, exactly.
__int128 load_integer(DType dt, const void* base, size_t i) {
    switch (dt.enumv()) {
    case DTypeEnum::INT8:
        return static_cast<const int8_t*>(base)[i];
    case DTypeEnum::UINT8:
        return static_cast<const uint8_t*>(base)[i];
    case DTypeEnum::INT16:
        return static_cast<const int16_t*>(base)[i];
    case DTypeEnum::UINT16:
        return static_cast<const uint16_t*>(base)[i];
    case DTypeEnum::INT32:
        return static_cast<const int32_t*>(base)[i];
    case DTypeEnum::UINT32:
        return static_cast<const uint32_t*>(base)[i];
    case DTypeEnum::INT64:
        return static_cast<const int64_t*>(base)[i];
    case DTypeEnum::UINT64:
        return static_cast<const uint64_t*>(base)[i];
    default:
        BRAID_THROW(DTypeError, "{} is not an integer dtype", dt.name());
    }
}

template <typename T> void store_clamped(void* base, size_t i, __int128 v) {
    v = std::clamp<__int128>(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    static_cast<T*>(base)[i] = T(v);
}

//! Writes an integer into element `i` of an integer buffer, saturating at the dtype's bounds.
void store_integer(DType dt, void* base, size_t i, __int128 v) {
    switch (dt.enumv()) {
    case DTypeEnum::INT8:
        return store_clamped<int8_t>(base, i, v);
    case DTypeEnum::UINT8:
        return store_clamped<uint8_t>(base, i, v);
    case DTypeEnum::INT16:
        return store_clamped<int16_t>(base, i, v);
    case DTypeEnum::UINT16:
        return store_clamped<uint16_t>(base, i, v);
    case DTypeEnum::INT32:
        return store_clamped<int32_t>(base, i, v);
    case DTypeEnum::UINT32:
        return store_clamped<uint32_t>(base, i, v);
    case DTypeEnum::INT64:
        return store_clamped<int64_t>(base, i, v);
    case DTypeEnum::UINT64:
        return store_clamped<uint64_t>(base, i, v);
    default:
        BRAID_THROW(DTypeError, "{} is not an integer dtype", dt.name());
    }
}
} // namespace

void store_from_double(DType dt, void* base, size_t i, double v) {
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
        static_cast<float*>(base)[i] = float(v);
        break;
    case DTypeEnum::FLOAT16:
        // Below 2^-14 float16 is subnormal: a fixed spacing of 2^-24.
        static_cast<uint16_t*>(base)[i] = float_to_half(
            float(std::fabs(v) < 0x1p-14 ? round_to_quantum(v, -24) : round_to_bits(v, 11)));
        break;
    case DTypeEnum::BFLOAT16:
        // Below 2^-126 bfloat16 is subnormal: a fixed spacing of 2^-133.
        static_cast<uint16_t*>(base)[i] = float_to_bf16(
            float(std::fabs(v) < 0x1p-126 ? round_to_quantum(v, -133) : round_to_bits(v, 8)));
        break;
    case DTypeEnum::INT8:
        static_cast<int8_t*>(base)[i] = saturate_int<int8_t>(v);
        break;
    case DTypeEnum::UINT8:
        static_cast<uint8_t*>(base)[i] = saturate_int<uint8_t>(v);
        break;
    case DTypeEnum::INT32:
        static_cast<int32_t*>(base)[i] = saturate_int<int32_t>(v);
        break;
    case DTypeEnum::INT64:
        static_cast<int64_t*>(base)[i] = saturate_int<int64_t>(v);
        break;
    case DTypeEnum::BOOL:
        static_cast<uint8_t*>(base)[i] = v != 0;
        break;
    case DTypeEnum::FLOAT64:
        static_cast<double*>(base)[i] = v;
        break;
    case DTypeEnum::INT16:
        static_cast<int16_t*>(base)[i] = saturate_int<int16_t>(v);
        break;
    case DTypeEnum::UINT16:
        static_cast<uint16_t*>(base)[i] = saturate_int<uint16_t>(v);
        break;
    case DTypeEnum::UINT32:
        static_cast<uint32_t*>(base)[i] = saturate_int<uint32_t>(v);
        break;
    case DTypeEnum::UINT64:
        static_cast<uint64_t*>(base)[i] = saturate_int<uint64_t>(v);
        break;
    }
}

namespace {

//! One element of S as D, with the rules of store_from_double(load_as_double()): an integer
//! saturates at D's bounds; a float truncates toward zero and saturates, NaN becomes 0; an
//! integer of at most 32 bits becomes a float rounded once, to nearest even.
template <typename S, typename D> D convert_one(S v) {
    if constexpr (std::is_floating_point_v<D>) {
        return D(v);
    } else if constexpr (std::is_floating_point_v<S> && sizeof(D) <= 2) {
        // D's bounds are exact in float: clamp, then the conversion truncates toward zero.
        float x = v != v ? 0.f : float(v);
        x = std::clamp(x, float(std::numeric_limits<D>::min()),
                       float(std::numeric_limits<D>::max()));
        return D(int32_t(x));
    } else if constexpr (std::is_floating_point_v<S> && std::is_same_v<D, int32_t>) {
        // In float as well: -2^31 is exact, every float from 2^31 up saturates, and the
        // conversion truncates toward zero.
        float x = v != v ? 0.f : std::max(float(v), -2147483648.f);
        return x >= 2147483648.f ? std::numeric_limits<int32_t>::max() : int32_t(x);
    } else if constexpr (std::is_floating_point_v<S>) {
        double x = v != v ? 0.0 : std::trunc(double(v));
        x = std::clamp(x, double(std::numeric_limits<D>::min()),
                       double(std::numeric_limits<D>::max()));
        return D(x);
    } else {
        return D(std::clamp<int64_t>(int64_t(v), std::numeric_limits<D>::min(),
                                     std::numeric_limits<D>::max()));
    }
}

template <typename S, typename D> void convert_typed(const void* src, void* dst, size_t n) {
    auto s = static_cast<const S*>(src);
    auto d = static_cast<D*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = convert_one<S, D>(s[i]);
}

template <typename S> bool convert_from(const void* src, DType dst_dt, void* dst, size_t n) {
    switch (dst_dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return convert_typed<S, float>(src, dst, n), true;
    case DTypeEnum::INT8:
        return convert_typed<S, int8_t>(src, dst, n), true;
    case DTypeEnum::UINT8:
        return convert_typed<S, uint8_t>(src, dst, n), true;
    case DTypeEnum::INT32:
        return convert_typed<S, int32_t>(src, dst, n), true;
    default:
        return false;
    }
}

//! The conversions among float32, int8, uint8 and int32 (quantized models convert whole
//! activations between them: DynamicQuantizeLinear, ConvInteger, MatMulInteger) as typed
//! loops; false for any other pair.
bool convert_typed_pair(DType src_dt, const void* src, DType dst_dt, void* dst, size_t n) {
    switch (src_dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return convert_from<float>(src, dst_dt, dst, n);
    case DTypeEnum::INT8:
        return convert_from<int8_t>(src, dst_dt, dst, n);
    case DTypeEnum::UINT8:
        return convert_from<uint8_t>(src, dst_dt, dst, n);
    case DTypeEnum::INT32:
        return convert_from<int32_t>(src, dst_dt, dst, n);
    default:
        return false;
    }
}

} // namespace

void convert_elements(DType src_dt, const void* src, DType dst_dt, void* dst, size_t n) {
    if (n == 0) return; // an empty tensor may have no storage at all (null pointers)
    if (src_dt == dst_dt) {
        std::memcpy(dst, src, n * src_dt.size());
        return;
    }
    if (convert_typed_pair(src_dt, src, dst_dt, dst, n)) return;
    // Fast paths for the conversions mixed-precision graphs use most.
    if (src_dt == dtype::Float32() && dst_dt == dtype::Float16()) {
        auto s = static_cast<const float*>(src);
        auto d = static_cast<uint16_t*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = float_to_half(s[i]);
        return;
    }
    if (src_dt == dtype::Float32() && dst_dt == dtype::BFloat16()) {
        auto s = static_cast<const float*>(src);
        auto d = static_cast<uint16_t*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i]);
        return;
    }
    if (src_dt == dtype::Float16() && dst_dt == dtype::Float32()) {
        auto s = static_cast<const uint16_t*>(src);
        auto d = static_cast<float*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = half_to_float(s[i]);
        return;
    }
    if (src_dt == dtype::BFloat16() && dst_dt == dtype::Float32()) {
        auto s = static_cast<const uint16_t*>(src);
        auto d = static_cast<float*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = bf16_to_float(s[i]);
        return;
    }
    if (src_dt == dtype::Float32() && dst_dt == dtype::Float64()) {
        auto s = static_cast<const float*>(src);
        auto d = static_cast<double*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = s[i];
        return;
    }
    if (src_dt == dtype::Float64() && dst_dt == dtype::Float32()) {
        auto s = static_cast<const double*>(src);
        auto d = static_cast<float*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = float(s[i]); // one rounding, to nearest even
        return;
    }
    if (src_dt.is_integer() && dst_dt.is_integer()) {
        // Exact through 128 bits (double would round int64 and uint64 beyond 2^53).
        for (size_t i = 0; i < n; ++i) store_integer(dst_dt, dst, i, load_integer(src_dt, src, i));
        return;
    }
    if (src_dt == dtype::Int64() && dst_dt == dtype::Float64()) {
        auto s = static_cast<const int64_t*>(src);
        auto d = static_cast<double*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = double(s[i]); // one rounding, to nearest even
        return;
    }
    if ((src_dt == dtype::Int64() || src_dt == dtype::Uint64()) && dst_dt.is_float()) {
        // 64-bit integers beyond 2^53 are inexact in double: round the integer itself to the
        // target's significant bits, so the value reaches the target exactly and rounds once.
        int bits = dst_dt == dtype::Float64()   ? 53
                   : dst_dt == dtype::Float32() ? 24
                   : dst_dt == dtype::Float16() ? 11
                                                : 8;
        for (size_t i = 0; i < n; ++i) {
            __int128 w = load_integer(src_dt, src, i);
            bool negative = w < 0;
            uint64_t mag = negative ? uint64_t(-w) : uint64_t(w);
            int len = 64 - __builtin_clzll(mag | 1);
            if (len > bits) {
                int drop = len - bits;
                uint64_t lsb = (mag >> drop) & 1;
                uint64_t rest = mag & ((uint64_t(1) << drop) - 1), half = uint64_t(1) << (drop - 1);
                mag >>= drop;
                if (rest > half || (rest == half && lsb)) ++mag;
                // mag may have carried to 2^bits: still exact in double.
                store_from_double(dst_dt, dst, i,
                                  std::ldexp(negative ? -double(mag) : double(mag), drop));
            } else {
                store_from_double(dst_dt, dst, i, negative ? -double(mag) : double(mag));
            }
        }
        return;
    }
    // Every other source is exact in double (float64 itself included), and store_from_double
    // rounds once into the target.
    for (size_t i = 0; i < n; ++i)
        store_from_double(dst_dt, dst, i, load_as_double(src_dt, src, i));
}

} // namespace braid
