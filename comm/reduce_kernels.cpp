#include "comm/reduce_kernels.h"

#include "base/error.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace braid::comm {

namespace {

//! Elements per chunk: the accumulator (at most 8 bytes each) stays in L1.
constexpr size_t CHUNK = 2048;

template <typename T> T op_sum(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return T(U(a) + U(b));
    } else {
        return a + b;
    }
}

template <typename T, ReduceOp OP> inline T apply(T a, T b) {
    if constexpr (OP == ReduceOp::SUM)
        return op_sum<T>(a, b);
    else if constexpr (OP == ReduceOp::MAX)
        return a < b ? b : a;
    else
        return b < a ? b : a;
}

//! How a storage type is read into and written from its accumulator type.
template <typename Storage> struct Native {
    using Acc = Storage;
    static Acc load(Storage v) { return v; }
    static Storage store(Acc v) { return v; }
};
struct Half {
    using Acc = float;
    static float load(uint16_t v) { return half_to_float(v); }
    static uint16_t store(float v) { return float_to_half(v); }
};
struct BFloat {
    using Acc = float;
    static float load(uint16_t v) { return bf16_to_float(v); }
    static uint16_t store(float v) { return float_to_bf16(v); }
};

template <typename Storage, typename Conv, ReduceOp OP>
void reduce_chunks(const void* const* ins, size_t n_in, void* const* outs, size_t n_out,
                   size_t offset, size_t count) {
    using Acc = typename Conv::Acc;
    Acc acc[CHUNK];
    Storage out[CHUNK];
    for (size_t begin = 0; begin < count; begin += CHUNK) {
        size_t n = std::min(CHUNK, count - begin);
        size_t at = offset + begin;
        const Storage* first = static_cast<const Storage*>(ins[0]) + at;
        if (n_in == 1) {
            for (size_t i = 0; i < n; ++i) acc[i] = Conv::load(first[i]);
        } else {
            // The first two inputs in one pass: one fewer trip through the accumulator.
            const Storage* second = static_cast<const Storage*>(ins[1]) + at;
            for (size_t i = 0; i < n; ++i)
                acc[i] = apply<Acc, OP>(Conv::load(first[i]), Conv::load(second[i]));
        }
        for (size_t k = 2; k < n_in; ++k) {
            const Storage* in = static_cast<const Storage*>(ins[k]) + at;
            for (size_t i = 0; i < n; ++i) acc[i] = apply<Acc, OP>(acc[i], Conv::load(in[i]));
        }
        const Storage* src;
        if constexpr (std::is_same_v<Conv, Native<Storage>>) {
            src = acc;
        } else {
            for (size_t i = 0; i < n; ++i) out[i] = Conv::store(acc[i]);
            src = out;
        }
        for (size_t k = 0; k < n_out; ++k)
            std::memcpy(static_cast<Storage*>(outs[k]) + at, src, n * sizeof(Storage));
    }
}

template <typename Storage, typename Conv>
void reduce_typed(ReduceOp op, const void* const* ins, size_t n_in, void* const* outs, size_t n_out,
                  size_t offset, size_t count) {
    switch (op) {
    case ReduceOp::SUM:
        return reduce_chunks<Storage, Conv, ReduceOp::SUM>(ins, n_in, outs, n_out, offset, count);
    case ReduceOp::MAX:
        return reduce_chunks<Storage, Conv, ReduceOp::MAX>(ins, n_in, outs, n_out, offset, count);
    case ReduceOp::MIN:
        return reduce_chunks<Storage, Conv, ReduceOp::MIN>(ins, n_in, outs, n_out, offset, count);
    }
}

} // namespace

void reduce_to_many(DType dt, ReduceOp op, const void* const* ins, size_t n_in, void* const* outs,
                    size_t n_out, size_t offset, size_t count) {
    BRAID_ASSERT(n_in >= 1, "reduction without inputs");
    if (count == 0) return;
    switch (dt.enumv()) {
    case DTypeEnum::FLOAT32:
        return reduce_typed<float, Native<float>>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::FLOAT16:
        return reduce_typed<uint16_t, Half>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::BFLOAT16:
        return reduce_typed<uint16_t, BFloat>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::INT32:
        return reduce_typed<int32_t, Native<int32_t>>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::INT64:
        return reduce_typed<int64_t, Native<int64_t>>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::INT8:
        return reduce_typed<int8_t, Native<int8_t>>(op, ins, n_in, outs, n_out, offset, count);
    case DTypeEnum::UINT8:
        return reduce_typed<uint8_t, Native<uint8_t>>(op, ins, n_in, outs, n_out, offset, count);
    default:
        BRAID_THROW(DTypeError, "reduction over dtype {} is not supported", dt.name());
    }
}

void reduce_into(DType dt, ReduceOp op, void* dst, const void* src, size_t count) {
    const void* ins[2] = {dst, src};
    void* outs[1] = {dst};
    reduce_to_many(dt, op, ins, 2, outs, 1, 0, count);
}

} // namespace braid::comm
