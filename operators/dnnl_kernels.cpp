#include "operators/dnnl_kernels.h"
#include "operators/io.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if BRAID_WITH_DNNL
#include "base/determinism.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "operators/dense_kernels.h"
#include "operators/kernel_utils.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#endif

namespace braid::opr::kern {

namespace {

//! -1: not read yet; 0 off; 1 on.
std::atomic<int> g_dnnl_state{-1};

} // namespace

bool dnnl_conv_enabled() {
#if BRAID_WITH_DNNL
    int s = g_dnnl_state.load(std::memory_order_relaxed);
    if (s < 0) {
        const char* env = std::getenv("BRAID_DNNL_CONV");
        s = env && std::strcmp(env, "0") == 0 ? 0 : 1;
        int expected = -1;
        // A concurrent set_dnnl_conv_enabled() wins over the environment.
        if (!g_dnnl_state.compare_exchange_strong(expected, s)) s = expected;
    }
    return s == 1;
#else
    return false;
#endif
}

void set_dnnl_conv_enabled(bool on) {
    g_dnnl_state.store(on ? 1 : 0);
}

DnnlConstantWeights* if_constant(DnnlConstantWeights& kept, std::initializer_list<VarNode*> vars) {
    for (VarNode* v : vars)
        if (!v || !dynamic_cast<ImmutableTensor*>(v->owner())) return nullptr;
    return &kept;
}

#if !BRAID_WITH_DNNL

struct DnnlConstantWeights::Impl {};
DnnlConstantWeights::DnnlConstantWeights() = default;
DnnlConstantWeights::~DnnlConstantWeights() = default;

bool dnnl_conv2d_forward(const Conv2dParam&, const Tensor&, const Tensor&, Tensor&,
                         const DnnlConvFusion&, const ConvEpilogue*, Workspace&) {
    return false;
}

std::optional<size_t> dnnl_conv2d_workspace(const Conv2dParam&, const TensorShape&,
                                            const TensorShape&, const DnnlConvFusion&) {
    return std::nullopt;
}

std::string dnnl_conv2d_impl(const Conv2dParam&, const TensorShape&, const TensorShape&,
                             const DnnlConvFusion&) {
    return "";
}

bool dnnl_conv_integer_forward(const Conv2dParam&, const Tensor&, const Tensor&, int32_t, Tensor&,
                               DnnlConstantWeights*, Workspace&, bool) {
    return false;
}

size_t dnnl_conv_integer_workspace(const Conv2dParam&, const TensorShape&, DType,
                                   const TensorShape&, bool) {
    return 0;
}

#else

namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

const dnnl::engine& cpu_engine() {
    // dnnl_single_thread() first: it also applies braid's ISA cap, which must precede any kernel.
    static const dnnl::engine engine =
        (dnnl_single_thread(), dnnl::engine(dnnl::engine::kind::cpu, 0));
    return engine;
}

dnnl::stream& thread_stream() {
    thread_local dnnl::stream stream(cpu_engine());
    return stream;
}

//! A std::allocator with 64-byte alignment, for oneDNN's packed weights.
template <typename T> struct AlignedAllocator {
    using value_type = T;
    AlignedAllocator() = default;
    template <typename U> AlignedAllocator(const AlignedAllocator<U>&) {}
    T* allocate(size_t n) {
        void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <typename U> bool operator==(const AlignedAllocator<U>&) const { return true; }
};

//! Runs a primitive, turning oneDNN's errors into braid::LibraryError with its message.
void execute_checked(const dnnl::primitive& prim, std::unordered_map<int, memory> args,
                     const char* what) {
    try {
        prim.execute(thread_stream(), args);
    } catch (const dnnl::error& e) {
        BRAID_THROW(LibraryError, "oneDNN {}: {} (status {})", what, e.what(), int(e.status));
    }
}

//! A reorder primitive and its (user-managed) scratchpad.
struct Reorder {
    dnnl::reorder prim;
    memory::desc scratch_md;
    //! Copies `from` into `to` on the calling thread, with scratch_md's bytes at `scratch`.
    void run(const memory& from, const memory& to, uint8_t* scratch, const char* what) const {
        std::unordered_map<int, memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        if (scratch_md.get_size() > 0)
            args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch_md, cpu_engine(), scratch));
        execute_checked(prim, std::move(args), what);
    }
};

//! The primitives of one task shape: a convolution of one batch item computing `oc` output
//! channels (of a band of rows), and the reorders from and to braid's plain layouts where
//! oneDNN picked another or the task reads and writes a band of rows.
struct ConvPlan {
    dnnl::convolution_forward conv;
    memory::desc src_md, wei_md, dst_md, scratch_md;
    memory::desc src_plain, wei_plain, dst_plain; //!< NCHW / OIHW of one task, src strided
    bool has_bias = false;
    bool zero_point = false; //!< takes the source's zero point (integer convolutions)
    std::string impl;        //!< oneDNN's implementation name, e.g. "jit:avx2"
    std::optional<Reorder> src_reorder, wei_reorder; //!< plain (strided) -> primitive layout
    std::optional<Reorder> dst_reorder;              //!< primitive layout -> strided NCHW
    memory::desc dst_strided;                        //!< the task's slice of y
};

//! Geometry and fusion that determine a plan; compared bytewise. A plan computes output rows
//! [0, oh) of a task from source rows [0, h) (a band of the whole image where the task is a
//! band of output rows, with the padding of its edges: pt above, pb below).
struct PlanKey {
    int64_t c, h, w, o_total, oc, kh, kw, oh, ow;
    int64_t sh, sw, pt, pb, pw, dh, dw, groups;
    int64_t x_plane, y_plane; //!< channel strides of the whole source and output
    int64_t bias;
    int64_t exact;  //!< Conv2dParam::exact: no Winograd
    int64_t src_dt; //!< the source's dnnl data type: f32, or u8 / s8 (s8 weights, s32 output)
    int64_t narrow; //!< a u8 source below 128: sums are exact without VNNI too
    bool operator==(const PlanKey& k) const { return std::memcmp(this, &k, sizeof k) == 0; }
};

struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const {
        const auto* v = reinterpret_cast<const int64_t*>(&k);
        size_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < sizeof k / sizeof(int64_t); ++i)
            h = (h ^ size_t(v[i])) * 0x100000001b3ull;
        return h;
    }
};

bool is_integer(const PlanKey& k) {
    return k.src_dt != int64_t(memory::data_type::f32);
}

/*!
 * Whether oneDNN sums 8-bit products exactly on this CPU (within braid's and oneDNN's ISA caps):
 * with VNNI (vpdpbusd, AVX-512 or AVX2) or AMX it does. Without, its int8 kernels add pairs of
 * u8 x s8 products in 16 bits with saturation (vpmaddubsw), and a convolution of full-range
 * uint8 data gave wrong sums (for 64 channels of 3x3, most of them).
 */
bool exact_int8_products() {
    cpu_engine(); // applies braid's ISA cap first
    auto isa = unsigned(dnnl::get_effective_cpu_isa());
    return (isa &
            (unsigned(dnnl_cpu_isa_avx512_core_vnni) & ~unsigned(dnnl_cpu_isa_avx512_core))) ||
           (isa & (unsigned(dnnl_cpu_isa_avx2_vnni) & ~unsigned(dnnl_cpu_isa_avx2)));
}

//! One way to ask oneDNN for a convolution: its algorithm and the layouts of source and
//! destination (weights are always left to oneDNN).
struct ConvChoice {
    dnnl::algorithm algorithm;
    tag src, dst;
};

/*!
 * The choices tried for `k`, best first; the first that oneDNN runs with a JIT kernel is used.
 * Measured on the cnn benchmark's shapes on a 2-core AMD EPYC (AVX2 and AVX-512), single
 * thread, including the reorders from and to NCHW:
 *  - 3x3 stride 1: Winograd F(2x2, 3x3) (jit_fp32_wino_2x3:avx512_core, nChw16c) runs the
 *    64->64 56x56 case in ~1.05 ms against ~2.0 ms for the direct kernels, which already run
 *    near the FMA peak; it needs AVX-512, and is skipped elsewhere, and on outputs of fewer
 *    than 4 rows or columns, where most of its tiles are padding (a text recognizer's 1024->64
 *    3x3 on a 1x40 map: 0.67 ms against 0.21 ms for the direct kernel, which skips the kernel
 *    rows that fall on padding);
 *  - direct, nChw8c (jit:avx2): 2.05 ms for the same case; reorders from and to NCHW cost a
 *    few percent. oneDNN's own pick (tag::any: brgconv:avx512_core in NHWC) runs the
 *    convolution as fast but its NHWC -> NCHW reorder costs 4x more (0.8 ms for the 7x7/2 stem's
 *    1x32x112x112 output slice); nChw16c (jit:avx512_core) ran the 3x3 case ~20% slower;
 *  - a source with fewer than 8 channels (an image) stays NCHW, which the direct kernels read
 *    directly; its output goes to nChw16c first, for jit:avx512_core where the CPU has it: the
 *    cnn's 7x7/2 stem (3->64, 224x224) took 0.89 ms there against 1.73 ms in jit:avx2 with
 *    nChw8c, a text detector's 3x3/2 stem (3->16, 320x320) 0.16 against 0.30 ms, and the
 *    8-channel stem of a direction classifier 9 against 11 us. Without AVX-512 oneDNN has no
 *    JIT kernel for nChw16c and the next choice, nChw8c, runs;
 *  - depthwise convolutions (fewer than 8 input channels per group) in nChw16c where the
 *    channels fill its blocks, else nChw8c: oneDNN's own pick, brdgmm_dw in NHWC, runs them as
 *    fast, but the reorders from and to NCHW cost more than the convolution (1x200x2x96: 10 us
 *    each way around a 10 us convolution). Text recognizer 9.3 -> 8.2 ms, detector 11.4 ->
 *    10.3 ms, direction classifier 0.59 -> 0.51 ms (nChw8c; 200 channels do not fill 16-blocks,
 *    and nChw16c gave 0.56), one thread.
 * Winograd's transforms round otherwise than a sum of products, so an exact convolution
 * (Conv2dParam::exact: integers, as the ONNX integer convolutions compute) skips it.
 */
std::vector<ConvChoice> conv_choices(const PlanKey& k) {
    std::vector<ConvChoice> choices;
    // Integer convolutions: oneDNN's pick (brgconv in NHWC where it has VNNI).
    if (is_integer(k)) return {{dnnl::algorithm::convolution_direct, tag::any, tag::any}};
    if (k.kh == 3 && k.kw == 3 && k.sh == 1 && k.sw == 1 && k.dh == 1 && k.dw == 1 &&
        k.groups == 1 && !k.exact && k.oh >= 4 && k.ow >= 4)
        choices.push_back({dnnl::algorithm::convolution_winograd, tag::any, tag::any});
    if (k.groups > 1 && k.c / k.groups < 8) { // depthwise and alike: blocked, not NHWC
        if (k.c % 16 == 0)
            choices.push_back({dnnl::algorithm::convolution_direct, tag::nChw16c, tag::nChw16c});
        choices.push_back({dnnl::algorithm::convolution_direct, tag::nChw8c, tag::nChw8c});
    }
    if (k.groups == 1 && k.c < 8) // an image source
        choices.push_back({dnnl::algorithm::convolution_direct, tag::any, tag::nChw16c});
    tag src_blocked = k.c / k.groups < 8 ? tag::any : tag::nChw8c;
    choices.push_back({dnnl::algorithm::convolution_direct, src_blocked, tag::nChw8c});
    choices.push_back({dnnl::algorithm::convolution_direct, tag::any, tag::any});
    return choices;
}

//! Builds the plan for `k`, or nullptr where oneDNN has only a reference kernel (slower than
//! braid's im2col path) or cannot run the case.
std::shared_ptr<ConvPlan> make_plan(const PlanKey& k) {
    dnnl_single_thread();
    bool integer = is_integer(k);
    if (integer && !k.narrow && !exact_int8_products()) return nullptr;
    const auto src_t = memory::data_type(k.src_dt);
    const auto wei_t = integer ? memory::data_type::s8 : memory::data_type::f32;
    const auto dst_t = integer ? memory::data_type::s32 : memory::data_type::f32;
    memory::dims src_dims{1, k.c, k.h, k.w}, dst_dims{1, k.oc, k.oh, k.ow};
    memory::dims wei_dims =
        k.groups == 1 ? memory::dims{k.oc, k.c, k.kh, k.kw}
                      : memory::dims{k.groups, k.oc / k.groups, k.c / k.groups, k.kh, k.kw};
    auto plan = std::make_shared<ConvPlan>();
    plan->has_bias = k.bias != 0;
    plan->zero_point = integer;
    // A band of rows reads its rows of each source channel plane and writes its rows of each
    // output plane: strided views that a reorder copies from and into.
    bool band = k.x_plane != k.h * k.w || k.y_plane != k.oh * k.ow;
    plan->src_plain =
        memory::desc(src_dims, src_t, memory::dims{k.c * k.x_plane, k.x_plane, k.w, 1});
    plan->dst_plain = memory::desc(dst_dims, dst_t, tag::nchw);
    plan->wei_plain = memory::desc(wei_dims, wei_t, k.groups == 1 ? tag::oihw : tag::goihw);
    // The task's output slice inside y: channels [o0, o0 + oc) of one batch item.
    plan->dst_strided =
        memory::desc(dst_dims, dst_t, memory::dims{k.o_total * k.y_plane, k.y_plane, k.ow, 1});
    memory::desc bias_md =
        plan->has_bias ? memory::desc({k.oc}, memory::data_type::f32, tag::a) : memory::desc();
    memory::desc any_wei(wei_dims, wei_t, tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // The source's zero point, given per run: padding contributes nothing to the sums (as if
    // the source were padded with its zero point).
    if (integer) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::primitive_attr attr_user;
    attr_user.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    std::optional<dnnl::convolution_forward::primitive_desc> pd;
    for (const auto& choice : conv_choices(k)) {
        try {
            dnnl::convolution_forward::desc desc(
                dnnl::prop_kind::forward_inference, choice.algorithm,
                memory::desc(src_dims, src_t, choice.src), any_wei, bias_md,
                memory::desc(dst_dims, dst_t, choice.dst), {k.sh, k.sw}, {k.dh - 1, k.dw - 1},
                {k.pt, k.pw}, {k.pb, k.pw});
            dnnl::convolution_forward::primitive_desc candidate(desc, attr, cpu_engine());
            if (std::string(candidate.impl_info_str()).rfind("ref", 0) == 0) continue;
            pd = candidate;
            break;
        } catch (const dnnl::error&) {
            // not available for this case or CPU: try the next choice
        }
    }
    if (!pd) return nullptr; // braid's im2col kernel runs the case
    try {
        plan->conv = dnnl::convolution_forward(*pd);
        plan->impl = pd->impl_info_str();
        plan->src_md = pd->src_desc();
        plan->wei_md = pd->weights_desc();
        plan->dst_md = pd->dst_desc();
        plan->scratch_md = pd->scratchpad_desc();
        // User-managed scratchpads for the reorders too: with the library's (shared) one, two
        // threads running Winograd's weight reorder at once corrupted each other's results.
        auto reorder = [&](const memory::desc& from, const memory::desc& to) {
            dnnl::reorder::primitive_desc rpd(cpu_engine(), from, cpu_engine(), to, attr_user);
            return Reorder{dnnl::reorder(rpd), rpd.scratchpad_desc()};
        };
        if (band || plan->src_md != plan->src_plain)
            plan->src_reorder = reorder(plan->src_plain, plan->src_md);
        if (plan->wei_md != plan->wei_plain)
            plan->wei_reorder = reorder(plan->wei_plain, plan->wei_md);
        if (band || plan->dst_md != plan->dst_plain)
            plan->dst_reorder = reorder(plan->dst_md, plan->dst_strided);
    } catch (const dnnl::error&) {
        return nullptr;
    }
    return plan;
}

//! Process-wide plan cache: lookups take a mutex (a few hundred ns per convolution run); the
//! plans are immutable and executed concurrently (user-managed scratchpads).
std::shared_ptr<ConvPlan> find_plan(const PlanKey& k) {
    static std::mutex mutex;
    static std::unordered_map<PlanKey, std::shared_ptr<ConvPlan>, PlanKeyHash> cache;
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(k); it != cache.end()) return it->second;
    }
    auto plan = make_plan(k); // outside the lock: creation takes milliseconds
    std::lock_guard lock(mutex);
    // A bound against unbounded growth from ever-changing shapes: start over.
    if (cache.size() >= 512) cache.clear();
    return cache.emplace(k, plan).first->second;
}

using PackedBytes = std::vector<unsigned char, AlignedAllocator<unsigned char>>;

//! `plain` (a task's OIHW weights) in `plan`'s weight layout; `scratch` holds the reorder's
//! scratchpad.
PackedBytes reorder_weights(const ConvPlan& plan, const void* plain, uint8_t* scratch) {
    PackedBytes packed(plan.wei_md.get_size());
    memory from(plan.wei_plain, cpu_engine(), const_cast<void*>(plain));
    memory to(plan.wei_md, cpu_engine(), packed.data());
    plan.wei_reorder->run(from, to, scratch, "weight reorder");
    return packed;
}

/*!
 * Weights in a primitive's layout, with the plain (scaled) weights they were made from.
 * Reordering is cheap for the direct kernels but not for Winograd's weight transform (~0.5 ms
 * for 64x64x3x3, half the convolution), so the result is kept and reused while the plain
 * weights are unchanged: every run compares them bytewise with the kept copy (a memcmp, ~10 us
 * for 64x64x3x3), so weights updated in place between runs are always picked up.
 */
struct PackedWeights {
    std::vector<unsigned char> plain;
    PackedBytes packed;
};

/*!
 * The packed weights for `plan` of the weights at `key_ptr` (the operator's weight tensor,
 * offset to the task's first output channel), made from `plain` (`bytes` long: those
 * weights, scaled by the folded batch norm where there is one). The cache is process-wide and
 * thread-safe; entries are immutable snapshots, replaced when the weights change.
 */
std::shared_ptr<const PackedWeights> packed_weights(const ConvPlan& plan, const void* key_ptr,
                                                    const void* plain, size_t bytes,
                                                    uint8_t* scratch) {
    struct Key {
        const ConvPlan* plan;
        const void* weights;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const {
            return std::hash<const void*>()(k.plan) * 31 + std::hash<const void*>()(k.weights);
        }
    };
    static std::mutex mutex;
    static std::unordered_map<Key, std::shared_ptr<const PackedWeights>, KeyHash> cache;
    static size_t cached_bytes = 0;
    Key key{&plan, key_ptr};
    {
        std::lock_guard lock(mutex);
        if (auto it = cache.find(key); it != cache.end()) {
            const auto& entry = it->second;
            if (entry->plain.size() == bytes && std::memcmp(entry->plain.data(), plain, bytes) == 0)
                return entry;
        }
    }
    auto fresh = std::make_shared<PackedWeights>();
    const auto* first = static_cast<const unsigned char*>(plain);
    fresh->plain.assign(first, first + bytes);
    fresh->packed = reorder_weights(plan, plain, scratch);
    std::lock_guard lock(mutex);
    size_t kept = fresh->plain.size() + fresh->packed.size();
    // Bounded: past 256 MiB of kept weights, start over.
    if (cached_bytes + kept > (size_t(256) << 20)) {
        cache.clear();
        cached_bytes = 0;
    }
    auto& slot = cache[key];
    if (slot) cached_bytes -= slot->plain.size() + slot->packed.size();
    slot = fresh;
    cached_bytes += kept;
    return fresh;
}

//! The plan key of one batch item of x * w computing output channels [0, oc).
PlanKey plan_key(const Conv2dParam& pr, const TensorShape& xs, const TensorShape& ws, int64_t oc,
                 const DnnlConvFusion& fusion, memory::data_type src_dt = memory::data_type::f32,
                 bool narrow = false) {
    int64_t ekh = int64_t(pr.dilation_h) * (int64_t(ws[2]) - 1) + 1;
    int64_t ekw = int64_t(pr.dilation_w) * (int64_t(ws[3]) - 1) + 1;
    int64_t oh = (int64_t(xs[2]) + 2 * pr.pad_h - ekh) / pr.stride_h + 1;
    int64_t ow = (int64_t(xs[3]) + 2 * pr.pad_w - ekw) / pr.stride_w + 1;
    return PlanKey{int64_t(xs[1]),
                   int64_t(xs[2]),
                   int64_t(xs[3]),
                   int64_t(ws[0]),
                   oc,
                   int64_t(ws[2]),
                   int64_t(ws[3]),
                   oh,
                   ow,
                   pr.stride_h,
                   pr.stride_w,
                   pr.pad_h,
                   pr.pad_h,
                   pr.pad_w,
                   pr.dilation_h,
                   pr.dilation_w,
                   pr.groups,
                   int64_t(xs[2]) * int64_t(xs[3]),
                   oh * ow,
                   fusion.shift != nullptr,
                   pr.exact.value_or(false),
                   int64_t(src_dt),
                   narrow};
}

//! Output rows below which a band is not worth a task of its own; bands start at multiples of
//! it (Winograd F(4x4, 3x3) computes 4-row tiles).
constexpr int64_t BAND_ROWS = 4;
//! Channel blocks per item in deterministic mode, whatever the threads (two: the machines the
//! suite runs on have two cores; more would cost dispatch on one thread).
constexpr int64_t DETERMINISTIC_BLOCKS = 2;

/*!
 * Whether braid's own kernel (conv2d_forward: the direct kernel of conv_direct.h for stride 1,
 * im2col and one GEMM otherwise; no reorders) runs a convolution faster than oneDNN's direct
 * kernel, measured on one thread of a 2-core AMD EPYC with AVX-512, at the AVX2 cap too:
 *  - pointwise (1x1, stride 1, no padding, one group): a GEMM on the plain layout. 480->480
 *    channels on 6x80 pixels: 0.89 ms against 1.8 ms in oneDNN (nChw8c, with its reorders);
 *  - one input channel, ungrouped (an audio frame or a spectrogram): the columns are the
 *    kernel window alone. A 512-tap 1-D convolution to 257 channels over 48000 samples (stride
 *    160): 0.38 ms against 0.64; a 3x3 one to 32 channels on 76x32: 0.015 against 0.086 ms;
 *  - a kernel of one row or one column (1xK or Kx1, a separable pair): the columns are K per
 *    input channel. A speech embedding's twenty 1x3 and 3x1 convolutions of 24-96 channels on
 *    maps of 74x32 down to 3x1: 0.79 ms against 1.15 ms in all with im2col, each of them faster
 *    (24->24 on 74x32: 67 against 91 us); 0.47 ms with the direct kernel (that one: 41 us).
 */
bool braid_kernel_faster(const Conv2dParam& pr, const TensorShape& ws) {
    if (pr.groups != 1) return false;
    bool pointwise = ws[2] == 1 && ws[3] == 1 && pr.stride_h == 1 && pr.stride_w == 1 &&
                     pr.pad_h == 0 && pr.pad_w == 0;
    bool one_row_or_column = (ws[2] == 1) != (ws[3] == 1);
    return pointwise || ws[1] == 1 || one_row_or_column;
}

} // namespace

//! One operator's kept weights: per (primitive, first output channel of the block).
struct DnnlConstantWeights::Impl {
    //! Weights of output channels from o0 in one layout: plans whose weights share a layout
    //! (the bands of one convolution, which differ in rows) share them.
    struct Entry {
        memory::desc layout;
        int64_t o0;
        std::shared_ptr<const void> weights;
    };
    std::mutex mutex;
    std::vector<Entry> entries;

    //! The weights of `plan`'s block from output channel o0, made by make() (outside the lock)
    //! when there are none in its layout yet.
    template <typename Make>
    std::shared_ptr<const void> get(const ConvPlan& plan, int64_t o0, Make&& make) {
        {
            std::lock_guard lock(mutex);
            for (const auto& e : entries)
                if (e.o0 == o0 && e.layout == plan.wei_md) return e.weights;
        }
        auto buffer = std::make_shared<const PackedBytes>(make());
        std::shared_ptr<const void> weights(buffer, buffer->data());
        std::lock_guard lock(mutex);
        entries.push_back({plan.wei_md, o0, weights});
        return weights;
    }
};

DnnlConstantWeights::DnnlConstantWeights() : m_impl(std::make_unique<Impl>()) {}
DnnlConstantWeights::~DnnlConstantWeights() = default;

namespace {

//! Block b of a convolution's item: output channels [o0, o0 + oc) of output rows [r0, r1),
//! from source rows [src_row, ...).
struct Block {
    int64_t o0, oc, r0, r1, src_row;
};

//! A slice of the workspace: the buffers of one task (see ConvSchedule).
struct TaskBuffers {
    uint8_t *dst, *scratch, *src, *scaled, *reorder;
};

/*!
 * How one convolution runs: its tasks (batch items, each split into blocks), the plan of each
 * block, and the layout of its workspace. The workspace holds, first, every item's source in
 * the primitive's layout where the tasks of an item share it (`shared_bytes`), then one slice
 * per task that may run at once (`slices`, the threads), each with the buffers of the largest
 * block: its destination in the primitive's layout (before the reorder into y), the
 * primitive's scratchpad, its part of the source (where each task reorders its own), weights
 * scaled by a folded batch norm, and the reorders' scratchpads.
 */
struct ConvSchedule {
    std::vector<Block> blocks;
    std::vector<std::shared_ptr<ConvPlan>> plans;
    int64_t cpg = 0, opg = 0;  //!< channels per group, in and out
    bool src_per_task = false; //!< each task reorders its own part of the source
    size_t src_item = 0;       //!< bytes of one item's shared source in the primitive's layout
    size_t shared_bytes = 0;
    size_t slices = 1;
    size_t dst_bytes = 0, scratch_bytes = 0, src_bytes = 0, scaled_bytes = 0, reorder_bytes = 0;

    size_t slice_bytes() const {
        return dst_bytes + scratch_bytes + src_bytes + scaled_bytes + reorder_bytes;
    }
    size_t workspace_bytes() const { return shared_bytes + slices * slice_bytes(); }
    //! Slice `i` of a workspace at `base`.
    TaskBuffers slice(uint8_t* base, size_t i) const {
        uint8_t* p = base + shared_bytes + i * slice_bytes();
        return {p, p + dst_bytes, p + dst_bytes + scratch_bytes,
                p + dst_bytes + scratch_bytes + src_bytes,
                p + dst_bytes + scratch_bytes + src_bytes + scaled_bytes};
    }
};

//! What decides a convolution's schedule besides its parameters: the shapes, the source's
//! data type and what is fused.
struct ConvCase {
    const TensorShape &x, &w;
    memory::data_type src_dt = memory::data_type::f32;
    bool narrow = false; //!< a u8 source below 128 (dnnl_conv_integer_forward())
};

//! The schedule of a convolution at the calling thread's kernel threads, or nullopt where
//! oneDNN does not run it (disabled, nothing to compute, or no JIT kernel for a block).
std::optional<ConvSchedule> schedule_convolution(const Conv2dParam& pr, const ConvCase& cc,
                                                 const DnnlConvFusion& fusion) {
    const auto &xs = cc.x, &ws = cc.w;
    // No work (an empty batch, no channels): braid's kernel writes what there is.
    if (!dnnl_conv_enabled() || xs.total_nr_elems() == 0 || ws.total_nr_elems() == 0)
        return std::nullopt;
    PlanKey key = plan_key(pr, xs, ws, 0, fusion, cc.src_dt, cc.narrow);
    int64_t n = int64_t(xs[0]), o = int64_t(ws[0]);
    int64_t groups = pr.groups;
    // Tasks: batch items, and blocks of each item when there are fewer items than threads (a
    // batch of one: the common inference case). An item splits into bands of output rows where
    // the output has rows enough: each band is the whole convolution on its rows, reordering
    // only its rows of the source (no work is repeated but the rows the kernel window
    // overlaps). Otherwise it splits into blocks of output channels: an ungrouped convolution
    // in whole 8-channel blocks (oneDNN's AVX2 block), every block reading the whole source; a
    // grouped one (depthwise) in whole groups, each block a grouped convolution of its own
    // channels, reordering only its slice of the source.
    int64_t threads = int64_t(kernel_threads()), items = n;
    // Deterministic mode: the blocks depend on the shape alone, as if DETERMINISTIC_BLOCKS
    // threads ran one item, so that every output channel is computed by the same primitive (a
    // fixed order of its sum: each primitive runs single-threaded, one item at a time) whatever
    // the batch, the thread count or the comp node. Blocks of channels, never bands.
    bool deterministic = deterministic_kernels();
    if (deterministic) {
        threads = DETERMINISTIC_BLOCKS;
        items = 1;
    }
    ConvSchedule sc;
    int64_t cpg = sc.cpg = int64_t(xs[1]) / groups, opg = sc.opg = o / groups;
    int64_t oh = key.oh, ow = key.ow, ih = int64_t(xs[2]);
    // The unit of a block: 8 output channels, or enough whole groups for 8 channels.
    int64_t unit = 8, units = o / 8;
    if (groups > 1) {
        unit = opg >= 8 || 8 % opg != 0 || groups % (8 / opg) != 0 ? 1 : 8 / opg;
        units = groups / unit;
        unit *= opg; // in output channels
    }
    // Each block must be worth its dispatch: a split of a small convolution (a voice-activity
    // model's, a few hundred thousand multiply-adds) cost more than it saved, and the model ran
    // slower on 2 threads than on 1 (0.076 -> 0.161 ms).
    double macs =
        double(o) * double(oh) * double(ow) * double(ws[1]) * double(ws[2]) * double(ws[3]);
    int64_t wanted = 1;
    if (items < threads)
        wanted = std::min((threads + items - 1) / items, int64_t(macs / PARALLEL_MIN_MACS));
    wanted = std::max<int64_t>(wanted, 1);
    bool bands = !deterministic && wanted > 1 && oh >= 2 * BAND_ROWS;
    bool split_groups = !bands && groups > 1 && items < threads;
    int64_t nblocks =
        std::max<int64_t>(bands ? std::min(wanted, oh / BAND_ROWS) : std::min(wanted, units), 1);

    sc.blocks.resize(size_t(nblocks));
    sc.plans.resize(size_t(nblocks));
    int64_t ekh = int64_t(pr.dilation_h) * (int64_t(ws[2]) - 1) + 1;
    for (int64_t b = 0; b < nblocks; ++b) {
        Block& blk = sc.blocks[size_t(b)];
        if (bands) { // all channels of rows starting at multiples of BAND_ROWS
            auto bound = [&](int64_t i) {
                if (i == nblocks) return oh;
                return (2 * oh * i / nblocks + BAND_ROWS) / (2 * BAND_ROWS) * BAND_ROWS;
            };
            blk = {0, o, bound(b), bound(b + 1), 0};
            int64_t in0 = blk.r0 * pr.stride_h - pr.pad_h;
            int64_t in1 = (blk.r1 - 1) * pr.stride_h - pr.pad_h + ekh;
            blk.src_row = std::max<int64_t>(in0, 0);
            key.oc = o;
            key.oh = blk.r1 - blk.r0;
            key.h = std::min(in1, ih) - blk.src_row;
            key.pt = blk.src_row - in0;
            key.pb = std::max<int64_t>(in1 - ih, 0);
            if (key.h <= 0) return std::nullopt; // a band inside the padding: braid's kernel
        } else {                                 // channels in whole units, all rows
            auto bound = [&](int64_t i) { return i == nblocks ? o : units * i / nblocks * unit; };
            blk = {bound(b), bound(b + 1) - bound(b), 0, oh, 0};
            key.oc = blk.oc;
            if (split_groups) { // a grouped convolution of the block's groups alone
                key.groups = key.oc / opg;
                key.c = key.groups * cpg;
            }
        }
        sc.plans[size_t(b)] = find_plan(key);
        if (!sc.plans[size_t(b)]) return std::nullopt;
        // Blocks of channels of an ungrouped convolution take the source in one layout (it is
        // reordered once per item).
        if (!bands && !split_groups && sc.plans[size_t(b)]->src_md != sc.plans[0]->src_md)
            return std::nullopt;
    }

    // The workspace's layout.
    using W = Workspace;
    const ConvPlan& first = *sc.plans[0];
    sc.src_per_task = bands || split_groups;
    if (first.src_reorder && !sc.src_per_task) {
        sc.src_item = W::aligned(first.src_md.get_size());
        sc.shared_bytes = sc.src_item * size_t(n);
    }
    bool integer = is_integer(key);
    size_t w_per_oc = ws[1] * ws[2] * ws[3];
    for (size_t b = 0; b < sc.plans.size(); ++b) {
        const ConvPlan& plan = *sc.plans[b];
        auto most = [](size_t& to, size_t bytes) { to = std::max(to, W::aligned(bytes)); };
        if (plan.dst_reorder) most(sc.dst_bytes, plan.dst_md.get_size());
        most(sc.scratch_bytes, plan.scratch_md.get_size());
        if (sc.src_per_task && plan.src_reorder) most(sc.src_bytes, plan.src_md.get_size());
        if (fusion.scale && !integer)
            most(sc.scaled_bytes, size_t(sc.blocks[b].oc) * w_per_oc * sizeof(float));
        for (const auto* r : {&plan.src_reorder, &plan.wei_reorder, &plan.dst_reorder})
            if (*r) most(sc.reorder_bytes, (*r)->scratch_md.get_size());
    }
    sc.slices = size_t(std::min<int64_t>(int64_t(kernel_threads()), n * nblocks));
    return sc;
}

//! The tensors of one convolution: float32 x, w and y, or 8-bit x and w with int32 y (and the
//! source's zero point).
struct ConvOperands {
    const Tensor &x, &w;
    Tensor& y;
    memory::data_type src_dt = memory::data_type::f32;
    int32_t src_zero_point = 0;
    bool narrow = false; //!< a u8 source below 128 (dnnl_conv_integer_forward())
};

//! dnnl_conv2d_forward() and dnnl_conv_integer_forward() on contiguous tensors.
bool run_convolution(const Conv2dParam& pr, const ConvOperands& io, const DnnlConvFusion& fusion,
                     const ConvEpilogue* epilogue, Workspace& workspace) {
    auto schedule =
        schedule_convolution(pr, {io.x.shape(), io.w.shape(), io.src_dt, io.narrow}, fusion);
    if (!schedule) return false;
    const ConvSchedule& sc = *schedule;
    const auto &xs = io.x.shape(), &ws = io.w.shape(), &ys = io.y.shape();
    int64_t n = int64_t(xs[0]), o = int64_t(ws[0]);
    int64_t cpg = sc.cpg, opg = sc.opg, nblocks = int64_t(sc.blocks.size());
    int64_t oh = int64_t(ys[2]), ow = int64_t(ys[3]), ih = int64_t(xs[2]), iw = int64_t(xs[3]);
    bool integer = io.src_dt != memory::data_type::f32;
    const ConvPlan& first = *sc.plans[0];
    uint8_t* base = workspace.get(sc.workspace_bytes());
    WorkspaceSlices slices(sc.slices);

    // Byte pointers and element sizes: float32, or 8-bit source and weights (the destination
    // is float32 or int32, 4 bytes either way).
    const auto* xp = static_cast<const unsigned char*>(io.x.raw_ptr());
    const auto* wp = static_cast<const unsigned char*>(io.w.raw_ptr());
    auto* yp = static_cast<unsigned char*>(io.y.raw_ptr());
    size_t elem = integer ? 1 : sizeof(float);
    size_t in_plane = size_t(ih * iw), in_item = xs[1] * in_plane, out_plane = size_t(oh * ow);
    size_t w_per_oc = ws[1] * ws[2] * ws[3];

    // Phase 1: the source of every batch item in the primitive's layout, in the workspace (the
    // tasks of phase 2 read it), unless each task reorders its own part.
    const unsigned char* src = xp;
    size_t src_item = in_item * elem; // bytes
    if (sc.shared_bytes) {
        src_item = sc.src_item;
        parallel_for(size_t(n), 1, [&](size_t begin, size_t end) {
            dnnl_single_thread();
            WorkspaceSlices::Claim slice(slices);
            uint8_t* scratch = sc.slice(base, slice.index()).reorder;
            for (size_t i = begin; i < end; ++i) {
                memory from(first.src_plain, cpu_engine(),
                            const_cast<unsigned char*>(xp + i * in_item * elem));
                memory to(first.src_md, cpu_engine(), base + i * src_item);
                first.src_reorder->run(from, to, scratch, "source reorder");
            }
        });
        src = base;
    }

    // Phase 2: one task per (batch item, block): weights of the block (scaled by the folded
    // batch norm) into the primitive's layout, the convolution, and its output into y.
    parallel_for(size_t(n * nblocks), 1, [&](size_t begin, size_t end) {
        dnnl_single_thread();
        WorkspaceSlices::Claim slice(slices);
        TaskBuffers buf = sc.slice(base, slice.index());
        for (size_t t = begin; t < end; ++t) {
            size_t item = t / size_t(nblocks), b = t % size_t(nblocks);
            const ConvPlan& plan = *sc.plans[b];
            const Block& blk = sc.blocks[b];
            size_t o0 = size_t(blk.o0), oc = size_t(blk.oc);
            // The block's weights, scaled by the folded batch norm (float32 only).
            auto scaled = [&]() -> const void* {
                const void* wt = wp + o0 * w_per_oc * elem;
                if (!fusion.scale) return wt;
                auto* s = reinterpret_cast<float*>(buf.scaled);
                for (size_t r = 0; r < oc; ++r) {
                    float a = fusion.scale[o0 + r];
                    const float* in = static_cast<const float*>(wt) + r * w_per_oc;
                    float* out = s + r * w_per_oc;
                    for (size_t i = 0; i < w_per_oc; ++i) out[i] = in[i] * a;
                }
                return s;
            };
            size_t w_bytes = oc * w_per_oc * elem;
            memory wei_mem;
            std::shared_ptr<const PackedWeights> packed;
            std::shared_ptr<const void> kept;
            if (fusion.constant_weights && (plan.wei_reorder || fusion.scale)) {
                kept = fusion.constant_weights->impl().get(plan, blk.o0, [&] {
                    const auto* wt = static_cast<const unsigned char*>(scaled());
                    return plan.wei_reorder ? reorder_weights(plan, wt, buf.reorder)
                                            : PackedBytes(wt, wt + w_bytes);
                });
                wei_mem = memory(plan.wei_md, cpu_engine(), const_cast<void*>(kept.get()));
            } else if (plan.wei_reorder) {
                packed =
                    packed_weights(plan, wp + o0 * w_per_oc * elem, scaled(), w_bytes, buf.reorder);
                wei_mem = memory(plan.wei_md, cpu_engine(),
                                 const_cast<unsigned char*>(packed->packed.data()));
            } else {
                wei_mem = memory(plan.wei_md, cpu_engine(), const_cast<void*>(scaled()));
            }
            auto* y_task = reinterpret_cast<float*>(yp) + (item * size_t(o) + o0) * out_plane +
                           size_t(blk.r0 * ow);
            void* dst = plan.dst_reorder ? static_cast<void*>(buf.dst) : y_task;
            memory dst_mem(plan.dst_md, cpu_engine(), dst);
            const unsigned char* task_src = src + item * src_item;
            if (sc.src_per_task) { // the block's channels and rows of the plain source
                task_src = xp + (item * in_item + o0 / size_t(opg) * size_t(cpg) * in_plane +
                                 size_t(blk.src_row * iw)) *
                                    elem;
                if (plan.src_reorder) {
                    memory from(plan.src_plain, cpu_engine(), const_cast<unsigned char*>(task_src));
                    memory to(plan.src_md, cpu_engine(), buf.src);
                    plan.src_reorder->run(from, to, buf.reorder, "source reorder");
                    task_src = buf.src;
                }
            }
            std::unordered_map<int, memory> args{
                {DNNL_ARG_SRC,
                 memory(plan.src_md, cpu_engine(), const_cast<unsigned char*>(task_src))},
                {DNNL_ARG_WEIGHTS, wei_mem},
                {DNNL_ARG_DST, dst_mem}};
            int32_t zero_point = io.src_zero_point;
            if (plan.zero_point)
                args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
                             memory(memory::desc({1}, memory::data_type::s32, tag::x), cpu_engine(),
                                    &zero_point));
            if (plan.has_bias)
                args.emplace(DNNL_ARG_BIAS,
                             memory(memory::desc({int64_t(oc)}, memory::data_type::f32, tag::a),
                                    cpu_engine(), const_cast<float*>(fusion.shift + o0)));
            if (plan.scratch_md.get_size() > 0)
                args.emplace(DNNL_ARG_SCRATCHPAD,
                             memory(plan.scratch_md, cpu_engine(), buf.scratch));
            execute_checked(plan.conv, std::move(args), "convolution");
            if (plan.dst_reorder) {
                memory to(plan.dst_strided, cpu_engine(), y_task);
                plan.dst_reorder->run(dst_mem, to, buf.reorder, "destination reorder");
            }
            if (epilogue) (*epilogue)(y_task, o0, oc, size_t((blk.r1 - blk.r0) * ow), out_plane);
        }
    });
    return true;
}

} // namespace

bool dnnl_conv2d_forward(const Conv2dParam& pr, const Tensor& x, const Tensor& w, Tensor& y,
                         const DnnlConvFusion& fusion, const ConvEpilogue* epilogue,
                         Workspace& workspace) {
    if (braid_kernel_faster(pr, w.shape())) return false;
    return run_convolution(pr, {x, w, y}, fusion, epilogue, workspace);
}

std::optional<size_t> dnnl_conv2d_workspace(const Conv2dParam& pr, const TensorShape& x,
                                            const TensorShape& w, const DnnlConvFusion& fusion) {
    if (braid_kernel_faster(pr, w)) return std::nullopt;
    auto sc = schedule_convolution(pr, {x, w}, fusion);
    if (!sc) return std::nullopt;
    return sc->workspace_bytes();
}

namespace {
memory::data_type integer_source(DType x) {
    return x == dtype::Uint8() ? memory::data_type::u8 : memory::data_type::s8;
}
} // namespace

bool dnnl_conv_integer_forward(const Conv2dParam& pr, const Tensor& x, const Tensor& w,
                               int32_t x_zero_point, Tensor& y,
                               DnnlConstantWeights* constant_weights, Workspace& workspace,
                               bool source_below_128) {
    auto src_dt = integer_source(x.dtype());
    DnnlConvFusion fusion;
    fusion.constant_weights = constant_weights;
    bool narrow = source_below_128 && src_dt == memory::data_type::u8;
    return run_convolution(pr, {x, w, y, src_dt, x_zero_point, narrow}, fusion, nullptr, workspace);
}

size_t dnnl_conv_integer_workspace(const Conv2dParam& pr, const TensorShape& x, DType x_dtype,
                                   const TensorShape& w, bool source_below_128) {
    auto src_dt = integer_source(x_dtype);
    bool narrow = source_below_128 && src_dt == memory::data_type::u8;
    auto sc = schedule_convolution(pr, {x, w, src_dt, narrow}, {});
    return sc ? sc->workspace_bytes() : 0;
}

std::string dnnl_conv2d_impl(const Conv2dParam& param, const TensorShape& x, const TensorShape& w,
                             const DnnlConvFusion& fusion) {
    if (!dnnl_conv_enabled() || braid_kernel_faster(param, w)) return "";
    auto plan = find_plan(plan_key(param, x, w, int64_t(w[0]), fusion));
    return plan ? plan->impl : "";
}

#endif // BRAID_WITH_DNNL

} // namespace braid::opr::kern
