#include "comm/reduce_kernels.h"

#include "base/error.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace braid::comm {

namespace {

//! Elements per chunk: the accumulator (at most 8 bytes each) stays in L1.
constexpr size_t CHUNK = 2048;

//! Copies with non-temporal 16-byte stores where `dst` is aligned, plain stores elsewhere.
void stream_store(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
    auto* d = static_cast<uint8_t*>(dst);
    auto* s = static_cast<const uint8_t*>(src);
    size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
    if (head > bytes) head = bytes;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    size_t body = bytes & ~size_t(15);
    for (size_t i = 0; i < body; i += 16)
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    std::memcpy(d + body, s + body, bytes - body);
#else
    std::memcpy(dst, src, bytes);
#endif
}

void store_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

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
    bool stream = count * sizeof(Storage) >= STREAM_MIN_BYTES;
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
        for (size_t k = 0; k < n_out; ++k) {
            Storage* dst = static_cast<Storage*>(outs[k]) + at;
            if (stream)
                stream_store(dst, src, n * sizeof(Storage));
            else
                std::memcpy(dst, src, n * sizeof(Storage));
        }
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

void reduce_dispatch(DType dt, ReduceOp op, const void* const* ins, size_t n_in, void* const* outs,
                     size_t n_out, size_t offset, size_t count) {
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

} // namespace

void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes < STREAM_MIN_BYTES) {
        std::memcpy(dst, src, bytes);
        return;
    }
    stream_store(dst, src, bytes);
    store_fence();
}

void reduce_to_many(DType dt, ReduceOp op, const void* const* ins, size_t n_in, void* const* outs,
                    size_t n_out, size_t offset, size_t count) {
    BRAID_ASSERT(n_in >= 1, "reduction without inputs");
    if (count == 0) return;
    reduce_dispatch(dt, op, ins, n_in, outs, n_out, offset, count);
    store_fence();
}

void reduce_into(DType dt, ReduceOp op, void* dst, const void* src, size_t count) {
    const void* ins[2] = {dst, src};
    void* outs[1] = {dst};
    reduce_to_many(dt, op, ins, 2, outs, 1, 0, count);
}

} // namespace braid::comm
