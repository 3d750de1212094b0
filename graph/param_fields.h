// A Param declared once. An operator's Param struct lists its fields in one static fields()
// function; hashing (deduplication), equality, the description in messages, dump, load and
// the range checks on load are derived from that list:
//
//     struct MatMulParam {
//         bool transpose_a = false;
//         bool transpose_b = false;
//         static constexpr auto fields() {
//             return std::tuple{param_field("transpose_a", &MatMulParam::transpose_a),
//                               param_field("transpose_b", &MatMulParam::transpose_b)};
//         }
//     };
//     class MatMul final : public ParamOperator<MatMul, MatMulParam> { ... };
//     // registration: reg.add("MatMul", "matmul", dump_param<MatMul>, load_param<MatMul>);
//
// dump_param<Op> and load_param<Op> (the default loader: read_param(), then Op::make with the
// loaded inputs) are the params functions of such an operator; no_params is the dumper of an
// operator without params.
//
// Field types: bool, integers (read back with a range check against the member's type),
// float and double (equal when their bits are), std::string, enums (with their name function:
// stored and shown by name), lists of integers, DType, TensorShape, std::optional of any of
// these (absent from the model when unset), and a nested Param with its own fields(), whose
// fields are flattened into the parent's (its field name is not stored).
// Description: "name=value" per field (lists as "1,2"), enums by bare name, true bools by bare
// name; false bools, empty lists and unset optionals left out, e.g. `Reduce(SUM axes=1 keepdims)`.
#pragma once

#include "base/hash.h"
#include "graph/operator_node.h"
#include "graph/param_io.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace braid {

//! One field of Param type P: its name in models and messages, its member, and for an enum
//! the function that names its values.
template <typename P, typename T> struct ParamField {
    const char* name;
    T P::*member;
    const char* (*name_of)(T) = nullptr;
};

//! A field of P.
template <typename P, typename T>
constexpr ParamField<P, T> param_field(const char* name, T P::*m) {
    return {name, m, nullptr};
}
//! An enum field of P, stored and shown by the names `name_of` gives.
template <typename P, typename E>
constexpr ParamField<P, E> param_field(const char* name, E P::*m, const char* (*name_of)(E)) {
    return {name, m, name_of};
}

namespace param_detail {

template <typename T> struct IsVector : std::false_type {};
template <typename T> struct IsVector<std::vector<T>> : std::true_type {};
template <typename T> struct IsOptional : std::false_type {};
template <typename T> struct IsOptional<std::optional<T>> : std::true_type {};
//! A nested Param (a struct with its own fields()), flattened into its parent.
template <typename T>
concept Record = requires {
    T::fields();
};

template <typename P, typename Fn> void for_each_field(Fn&& fn) {
    std::apply([&](auto&&... f) { (fn(f), ...); }, P::fields());
}

template <typename T> void hash_value(Hasher& h, const T& v) {
    if constexpr (Record<T>) {
        for_each_field<T>([&](auto& f) { hash_value(h, v.*f.member); });
    } else if constexpr (std::is_same_v<T, std::string>) {
        h.add(v);
    } else if constexpr (IsVector<T>::value) {
        h.add_pod(v.size());
        for (auto& x : v) hash_value(h, x);
    } else if constexpr (IsOptional<T>::value) {
        h.add_pod(v.has_value());
        if (v) hash_value(h, *v);
    } else if constexpr (std::is_same_v<T, DType>) {
        h.add_pod(v.enumv());
    } else if constexpr (std::is_same_v<T, TensorShape>) {
        hash_value(h, v.dims());
    } else {
        h.add_pod(v);
    }
}

//! Equal values; floats compare by their bits, so NaN params deduplicate and 0.0 / -0.0 stay
//! apart (as the hash sees them).
template <typename T> bool value_equal(const T& a, const T& b) {
    if constexpr (Record<T>) {
        bool eq = true;
        for_each_field<T>([&](auto& f) { eq = eq && value_equal(a.*f.member, b.*f.member); });
        return eq;
    } else if constexpr (std::is_floating_point_v<T>) {
        return std::memcmp(&a, &b, sizeof(T)) == 0;
    } else if constexpr (IsOptional<T>::value) {
        return a.has_value() == b.has_value() && (!a || value_equal(*a, *b));
    } else {
        return a == b;
    }
}

//! A stored float as member type T; a finite value outside T's range is an error.
template <typename T> T checked_float(const ParamReader& r, const char* name) {
    double v = r.read_float(name);
    if (std::isfinite(v) && std::abs(v) > double(std::numeric_limits<T>::max()))
        r.throw_bad_value(name, fmt::format("{}", v));
    return T(v);
}

template <typename T> std::string value_text(const T& v) {
    if constexpr (IsVector<T>::value) {
        std::string s;
        for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + value_text(v[i]);
        return s;
    } else if constexpr (std::is_same_v<T, DType>) {
        return v.name();
    } else if constexpr (std::is_same_v<T, TensorShape>) {
        return v.to_string();
    } else {
        return fmt::format("{}", v);
    }
}

template <typename T, typename F> void describe_value(std::string& s, const F& f, const T& v);

template <typename P> void describe_fields(std::string& s, const P& p) {
    for_each_field<P>([&](auto& f) { describe_value(s, f, p.*f.member); });
}

template <typename T, typename F> void describe_value(std::string& s, const F& f, const T& v) {
    auto add = [&](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
    if constexpr (Record<T>) {
        describe_fields(s, v);
    } else if constexpr (std::is_enum_v<T>) {
        add(f.name_of(v));
    } else if constexpr (std::is_same_v<T, bool>) {
        if (v) add(f.name);
    } else if constexpr (IsOptional<T>::value) {
        if (v) add(fmt::format("{}={}", f.name, value_text(*v)));
    } else if constexpr (IsVector<T>::value) {
        if (!v.empty()) add(fmt::format("{}={}", f.name, value_text(v)));
    } else {
        add(fmt::format("{}={}", f.name, value_text(v)));
    }
}

template <typename P> void write_fields(ParamWriter& w, const P& p);

template <typename T, typename F> void write_value(ParamWriter& w, const F& f, const T& v) {
    if constexpr (Record<T>) {
        write_fields(w, v);
    } else if constexpr (std::is_enum_v<T>) {
        w.write_string(f.name, f.name_of(v));
    } else if constexpr (std::is_same_v<T, bool>) {
        w.write_bool(f.name, v);
    } else if constexpr (std::is_integral_v<T>) {
        w.write_int(f.name, int64_t(v));
    } else if constexpr (std::is_floating_point_v<T>) {
        w.write_float(f.name, double(v));
    } else if constexpr (std::is_same_v<T, std::string>) {
        w.write_string(f.name, v);
    } else if constexpr (std::is_same_v<T, DType>) {
        w.write_dtype(f.name, v);
    } else if constexpr (std::is_same_v<T, TensorShape>) {
        w.write_shape(f.name, v);
    } else if constexpr (IsOptional<T>::value) {
        if (v) write_value(w, f, *v);
    } else {
        static_assert(IsVector<T>::value, "unsupported param field type");
        w.write_int_list(f.name, v);
    }
}

template <typename P> void write_fields(ParamWriter& w, const P& p) {
    for_each_field<P>([&](auto& f) { write_value(w, f, p.*f.member); });
}

template <typename P> void read_fields(const ParamReader& r, P& p);

template <typename T, typename F> void read_value(const ParamReader& r, const F& f, T& v) {
    if constexpr (Record<T>) {
        read_fields(r, v);
    } else if constexpr (std::is_enum_v<T>) {
        v = r.read_enum<T>(f.name, f.name_of);
    } else if constexpr (std::is_same_v<T, bool>) {
        v = r.read_bool(f.name);
    } else if constexpr (std::is_integral_v<T>) {
        v = r.read_int_as<T>(f.name);
    } else if constexpr (std::is_floating_point_v<T>) {
        v = checked_float<T>(r, f.name);
    } else if constexpr (std::is_same_v<T, std::string>) {
        v = r.read_string(f.name);
    } else if constexpr (std::is_same_v<T, DType>) {
        v = r.read_dtype(f.name);
    } else if constexpr (std::is_same_v<T, TensorShape>) {
        v = r.read_shape(f.name);
    } else if constexpr (IsOptional<T>::value) {
        if (r.has(f.name)) {
            typename T::value_type x{};
            read_value(r, f, x);
            v = std::move(x);
        } else {
            v.reset();
        }
    } else {
        static_assert(IsVector<T>::value, "unsupported param field type");
        v = r.read_int_list<typename T::value_type>(f.name);
    }
}

template <typename P> void read_fields(const ParamReader& r, P& p) {
    for_each_field<P>([&](auto& f) { read_value(r, f, p.*f.member); });
}

} // namespace param_detail

//! Feeds every field of `p` into `h`.
template <typename P> void hash_param(Hasher& h, const P& p) {
    param_detail::hash_value(h, p);
}

//! True when every field of `a` equals that of `b` (floats by their bits).
template <typename P> bool param_equal(const P& a, const P& b) {
    return param_detail::value_equal(a, b);
}

//! The fields of `p` for messages (see the header comment).
template <typename P> std::string describe_param(const P& p) {
    std::string s;
    param_detail::describe_fields(s, p);
    return s;
}

//! Writes every field of `p` into a model.
template <typename P> void write_param(ParamWriter& w, const P& p) {
    param_detail::write_fields(w, p);
}

//! Reads what write_param() wrote; an integer outside its member's type is an error naming
//! the operator and the field.
template <typename P> P read_param(const ParamReader& r) {
    P p;
    param_detail::read_fields(r, p);
    return p;
}

/*!
 * Base of an operator with a Param declared by fields(): hash_params(), params_equal() and
 * param_string() come from the field list. `Derived` is the operator class (or the common base
 * of the types that share the Param). An operator that must never be merged with an
 * equal-looking one (communication, side effects) also overrides allow_dedup() to false.
 */
template <typename Derived, typename P> class ParamOperator : public OperatorNode {
public:
    using Param = P;
    const Param& param() const { return m_param; }
    void hash_params(Hasher& h) const override { hash_param(h, m_param); }
    bool params_equal(const OperatorNode& rhs) const override {
        return param_equal(m_param, static_cast<const Derived&>(rhs).m_param);
    }
    std::string param_string() const override { return describe_param(m_param); }

protected:
    ParamOperator(Param param, const OperatorConfig& config)
        : OperatorNode(config), m_param(std::move(param)) {}
    Param m_param;
};

//! The params dumper of an operator type whose params are its ParamOperator Param.
template <typename Opr> void dump_param(const OperatorNode& opr, ParamWriter& w) {
    write_param(w, opr_cast<Opr>(opr).param());
}

//! The params dumper of an operator type without params: it stores nothing.
inline void no_params(const OperatorNode&, ParamWriter&) {}

namespace param_detail {

template <size_t> using InputVar = SymbolVar;

//! Whether Opr::make(x_0, ..., x_{N-1}, args..., config) is a call, for N input vars x_i.
template <typename Opr, typename... Args, size_t... I>
constexpr bool makes_from_vars(std::index_sequence<I...>) {
    return requires {
        Opr::make(std::declval<InputVar<I>>()..., std::declval<Args>()...,
                  std::declval<const OperatorConfig&>());
    };
}
//! Whether Opr::make(inputs, args..., config) is a call, for an array of input vars.
template <typename Opr, typename... Args> constexpr bool makes_from_array() {
    return requires {
        Opr::make(std::declval<const SymbolVarArray&>(), std::declval<Args>()...,
                  std::declval<const OperatorConfig&>());
    };
}

//! How many input vars Opr::make takes one by one before `args`: the fewest, from N up to 6,
//! that make a call; 0 when it takes them as one array; -1 when neither.
template <typename Opr, size_t N, typename... Args> constexpr int nr_make_vars_from() {
    if constexpr (N > 6)
        return makes_from_array<Opr, Args...>() ? 0 : -1;
    else if constexpr (makes_from_vars<Opr, Args...>(std::make_index_sequence<N>{}))
        return int(N);
    else
        return nr_make_vars_from<Opr, N + 1, Args...>();
}
template <typename Opr, typename... Args> constexpr int nr_make_vars() {
    return nr_make_vars_from<Opr, 1, Args...>();
}
template <typename Opr, typename... Args>
constexpr bool makes_with = nr_make_vars<Opr, Args...>() >= 0;

inline SymbolVarArray as_outputs(SymbolVar v) {
    return {v};
}
inline SymbolVarArray as_outputs(SymbolVarArray v) {
    return v;
}

template <typename Opr, size_t... I, typename... Args>
SymbolVarArray make_from_vars(const OprLoadContext& ctx, std::index_sequence<I...>,
                              Args&&... args) {
    return as_outputs(Opr::make(ctx.input(I)..., std::forward<Args>(args)..., ctx.config));
}

//! Opr::make(inputs..., args..., config) with the loaded inputs, checking their number.
template <typename Opr, typename... Args>
SymbolVarArray make_from_inputs(const OprLoadContext& ctx, Args&&... args) {
    constexpr int n = nr_make_vars<Opr, Args...>();
    if constexpr (n == 0) {
        // The array form takes the graph from its first input, so it needs one.
        ctx.expect_inputs(1, std::numeric_limits<size_t>::max());
        return as_outputs(Opr::make(ctx.inputs, std::forward<Args>(args)..., ctx.config));
    } else {
        ctx.expect_inputs(n, n);
        return make_from_vars<Opr>(ctx, std::make_index_sequence<n>{}, std::forward<Args>(args)...);
    }
}

template <typename Opr>
concept HasParam = requires {
    typename Opr::Param;
};

} // namespace param_detail

/*!
 * The default loader: rebuilds an operator by calling its make() with the loaded inputs, the
 * Param read by read_param(), and the config. make() may take the Param whole or its fields
 * one by one in their declared order (`Gather::make(x, index, axis, config)`), and its inputs
 * as vars one by one (their number is checked) or as one SymbolVarArray (at least one input);
 * an operator type without a Param gets make(inputs..., config). A loader with checks beyond
 * the field types (lengths, finite values, counts that size allocations) is written by hand.
 */
template <typename Opr> SymbolVarArray load_param(const OprLoadContext& ctx) {
    using namespace param_detail;
    if constexpr (!HasParam<Opr>) {
        static_assert(makes_with<Opr>, "Opr::make(inputs..., config) is not a call");
        return make_from_inputs<Opr>(ctx);
    } else {
        using P = typename Opr::Param;
        P p = read_param<P>(ctx.params);
        if constexpr (makes_with<Opr, P>) {
            return make_from_inputs<Opr>(ctx, std::move(p));
        } else {
            return std::apply(
                [&](const auto&... f) {
                    static_assert(makes_with<Opr, decltype(p.*f.member)...>,
                                  "Opr::make takes neither its Param nor its fields after "
                                  "the inputs");
                    return make_from_inputs<Opr>(ctx, p.*f.member...);
                },
                P::fields());
        }
    }
}

} // namespace braid
