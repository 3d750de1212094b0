// Operator params in a model file: the small interface each operator type's dump and load
// functions use, free of any file-format type.
//
// An operator type serializes through the two functions of its descriptor
// (graph/operator_registry.h), registered by its family's register function. For an operator
// whose Param is declared once with fields() (graph/param_fields.h), both are generic and
// nothing is written by hand:
//
//     // operators/cumsum.cpp, in register_cumsum_operators():
//     reg.add("CumSum", "cumsum", dump_param<CumSum>, load_param<CumSum>);
//
// dump_param<Op> writes every field of the Param under its declared name; load_param<Op> reads
// them back (read_param()), checks the number of inputs and calls Op::make(inputs..., param,
// config). An operator without params registers no_params and load_param<Op>. Where loading
// must check more than each field's type (a list's length, a finite value, an input count the
// params decide, the load-time bindings), the loader is a function beside the operator that
// reads the Param with read_param() and then checks:
//
//     SymbolVarArray load_split(const OprLoadContext& ctx) {
//         ctx.expect_inputs(1, 1);
//         auto p = read_param<Split::Param>(ctx.params);
//         if (p.nr_parts > MAX_LOADED_SPLIT_PARTS) BRAID_THROW(SerializationError, ...);
//         return Split::make(ctx.input(0), std::move(p), ctx.config);
//     }
//
// Only params that are not a list of fields are written by hand with ParamWriter: Input's
// shape (the var's current one), the tensor of ImmutableTensor and SharedParam, and the slice
// records of the Subtensor types (stored column by column).
//
// Params are typed, named fields (int, float, bool, string, int list, float list, tensor).
// A reader throws SerializationError naming the operator and the field for a missing field or
// a field of another type, so a loader only states what it needs.
#pragma once

#include "base/error.h"
#include "graph/computing_graph.h"
#include "graph/symbol_var.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace braid::comm {
class GroupClient;
}

namespace braid {

//! Writes one operator's params while a model is dumped. Field names are unique per operator.
class ParamWriter {
public:
    virtual ~ParamWriter() = default;
    virtual void write_int(std::string_view name, int64_t value) = 0;
    virtual void write_float(std::string_view name, double value) = 0;
    virtual void write_bool(std::string_view name, bool value) = 0;
    virtual void write_string(std::string_view name, std::string_view value) = 0;
    virtual void write_ints(std::string_view name, const std::vector<int64_t>& values) = 0;
    virtual void write_floats(std::string_view name, const std::vector<double>& values) = 0;
    //! Stores a host tensor's values in the model (once per distinct content) and refers to it.
    virtual void write_tensor(std::string_view name, const Tensor& value) = 0;
    //! Stores the graph computing `outputs` (an operator's subgraph, such as an If's branch) as
    //! a model of its own inside this one; SerializationError where the writer cannot.
    virtual void write_graph(std::string_view name, const SymbolVarArray& outputs);

    //! An integer list of any integer type.
    template <typename T> void write_int_list(std::string_view name, const std::vector<T>& values) {
        write_ints(name, std::vector<int64_t>(values.begin(), values.end()));
    }
    //! A shape's dims as an int list.
    void write_shape(std::string_view name, const TensorShape& shape) {
        write_int_list(name, shape.dims());
    }
    //! A dtype by name ("float32").
    void write_dtype(std::string_view name, DType dtype) { write_string(name, dtype.name()); }
};

//! A graph stored in an operator's params (ParamWriter::write_graph), loaded.
struct StoredGraph {
    std::shared_ptr<ComputingGraph> graph;
    //! Its Input vars by name, and its outputs in the order written.
    std::map<std::string, SymbolVar> inputs;
    SymbolVarArray outputs;
};

//! Reads one operator's params while a model is loaded. Every read throws SerializationError
//! naming the operator and field when the field is missing or of another type.
class ParamReader {
public:
    virtual ~ParamReader() = default;
    //! Whether the operator has a field named `name`.
    virtual bool has(std::string_view name) const = 0;
    virtual int64_t read_int(std::string_view name) const = 0;
    virtual double read_float(std::string_view name) const = 0;
    virtual bool read_bool(std::string_view name) const = 0;
    virtual std::string read_string(std::string_view name) const = 0;
    virtual std::vector<int64_t> read_ints(std::string_view name) const = 0;
    virtual std::vector<double> read_floats(std::string_view name) const = 0;
    //! The tensor a field refers to: a host tensor, used in place from a memory-mapped model
    //! file when possible (no copy), else a copy.
    virtual Tensor read_tensor(std::string_view name) const = 0;
    //! The same, as a shared tensor: fields that refer to one stored tensor share one object.
    virtual std::shared_ptr<Tensor> read_shared_tensor(std::string_view name) const = 0;
    //! A graph written by ParamWriter::write_graph(), verified and loaded into a graph of its
    //! own (operators on the comp nodes recorded); SerializationError where the reader cannot.
    virtual StoredGraph read_graph(std::string_view name) const;
    //! The operator type's params version the model was written with.
    virtual uint32_t version() const = 0;
    //! The operator being loaded, for messages: `MatMul "fc1"`.
    virtual const std::string& context() const = 0;

    //! An integer that must fit `T`.
    template <typename T> T read_int_as(std::string_view name) const {
        int64_t v = read_int(name);
        check_range<T>(name, v);
        return T(v);
    }
    //! An integer list whose items must fit `T`.
    template <typename T> std::vector<T> read_int_list(std::string_view name) const {
        std::vector<T> res;
        for (int64_t v : read_ints(name)) {
            check_range<T>(name, v);
            res.push_back(T(v));
        }
        return res;
    }
    //! A shape: an int list of at most TensorShape::MAX_NDIM non-negative dims.
    TensorShape read_shape(std::string_view name) const;
    //! A dtype written by ParamWriter::write_dtype().
    DType read_dtype(std::string_view name) const;
    //! An enum written as its name: `name_of` maps each value to its name (values past the
    //! last one share a placeholder name such as "?", which never matches). Values in
    //! [0, `count`) are tried, so modes added later load without touching the loader.
    template <typename E>
    E read_enum(std::string_view name, const char* (*name_of)(E), size_t count = 256) const {
        std::string s = read_string(name);
        size_t found = count, matches = 0;
        for (size_t i = 0; i < count; ++i)
            if (s == name_of(E(i))) {
                found = i;
                ++matches;
            }
        if (matches != 1) throw_bad_value(name, s);
        return E(found);
    }

    //! Throws SerializationError: field `name` holds `value`, which is not valid here.
    [[noreturn]] void throw_bad_value(std::string_view name, std::string_view value) const;

private:
    template <typename T> void check_range(std::string_view name, int64_t v) const {
        if (v < int64_t(std::numeric_limits<T>::min()) ||
            (std::numeric_limits<T>::max() <= uint64_t(std::numeric_limits<int64_t>::max()) &&
             v > int64_t(std::numeric_limits<T>::max())))
            throw_bad_value(name, std::to_string(v));
    }
};

/*!
 * Per-rank facts bound when a model is loaded rather than stored in it, so one file serves
 * every rank. Operators that communicate (CollectiveComm) read them in their loader:
 *  - rank: this process's rank in every group; the root of a rooted collective is the rank
 *    that was root when the model was dumped;
 *  - world_size: the group size, replacing the recorded one when they differ (a model is
 *    rank-agnostic: one dumped from a 1-rank graph runs on any number of ranks);
 *  - the group manager: `group_client` when set, else a TCP client of `server`, else one
 *    in-process group manager shared by the whole process (ranks as threads).
 */
struct CollectiveBinding {
    int rank = -1;       //!< -1: as recorded in the model
    int world_size = 0;  //!< 0: as recorded in the model
    std::string server;  //!< group manager address "host:port"; empty: in-process
    std::string backend; //!< "local", "mpi" or "nccl"; empty: as recorded in the model
    //! The group manager's client; null: from `server`, or the process-wide in-process one.
    std::shared_ptr<comm::GroupClient> group_client;
};

//! What an operator type's loader receives: the graph being built, the operator's loaded
//! inputs, its params and config (name and comp node), and the load-time bindings.
struct OprLoadContext {
    ComputingGraph& graph;
    const SymbolVarArray& inputs;
    const ParamReader& params;
    const OperatorConfig& config;
    const CollectiveBinding& collective;
    //! Free-form load-time values (LoadOptions::bindings).
    const std::map<std::string, std::string>& bindings;
    //! Input shapes chosen at load time, by input name (LoadOptions::input_shapes).
    const std::map<std::string, TensorShape>& input_shapes;

    //! Input i; throws SerializationError naming the operator when the model gave fewer.
    SymbolVar input(size_t i) const;
    //! Throws SerializationError unless the operator has between `lo` and `hi` inputs.
    void expect_inputs(size_t lo, size_t hi) const;
};

//! Writes an operator's params; registered per type in OperatorDescriptor.
using ParamsDumper = void (*)(const OperatorNode& opr, ParamWriter& writer);
//! Rebuilds an operator from its loaded inputs and params by calling its make(); returns its
//! outputs in order. Registered per type in OperatorDescriptor.
using OperatorLoader = SymbolVarArray (*)(const OprLoadContext& ctx);

//! The operator as its concrete type, for a dumper (the registry dispatches by type name).
template <typename T> const T& opr_cast(const OperatorNode& opr) {
    auto* p = dynamic_cast<const T*>(&opr);
    BRAID_ASSERT(p, "{} dumped with the params dumper of another type", opr.describe());
    return *p;
}

} // namespace braid
