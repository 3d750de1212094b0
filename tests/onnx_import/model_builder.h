// What the ONNX importer's test files share: a small ONNX model built with ONNX's protobuf
// classes, tensors to feed it, and a temporary folder per test.
#pragma once

#include "braid.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace braid::testing {

namespace fs = std::filesystem;

//! A small opset-13 model under construction.
struct ModelBuilder {
    onnx::ModelProto model;
    onnx::GraphProto* g;

    ModelBuilder() {
        model.set_ir_version(8);
        auto* op = model.add_opset_import();
        op->set_domain("");
        op->set_version(13);
        g = model.mutable_graph();
        g->set_name("test");
    }
    static void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem,
                         const std::vector<int64_t>& dims) {
        v->set_name(name);
        auto* tt = v->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(elem);
        auto* shape = tt->mutable_shape();
        for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
    }
    void input(const std::string& name, int elem, const std::vector<int64_t>& dims) {
        set_type(g->add_input(), name, elem, dims);
    }
    //! An input whose dims of -1 are symbolic ("<name>_<i>").
    void symbolic_input(const std::string& name, int elem, const std::vector<int64_t>& dims) {
        auto* v = g->add_input();
        set_type(v, name, elem, {});
        auto* shape = v->mutable_type()->mutable_tensor_type()->mutable_shape();
        for (size_t i = 0; i < dims.size(); ++i)
            if (dims[i] < 0)
                shape->add_dim()->set_dim_param(name + "_" + std::to_string(i));
            else
                shape->add_dim()->set_dim_value(dims[i]);
    }
    //! An output of unknown dims (named "d0", "d1", ...), `rank` of them.
    void output(const std::string& name, int elem, int rank = 1) {
        auto* v = g->add_output();
        v->set_name(name);
        auto* tt = v->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(elem);
        auto* shape = tt->mutable_shape();
        for (int i = 0; i < rank; ++i) shape->add_dim()->set_dim_param("d" + std::to_string(i));
    }
    //! A sequence of `elem` tensors of any shape, as an input or an output; optional when
    //! `optional`.
    static void set_sequence_type(onnx::ValueInfoProto* v, const std::string& name, int elem,
                                  bool optional) {
        v->set_name(name);
        auto* t = v->mutable_type();
        if (optional) t = t->mutable_optional_type()->mutable_elem_type();
        t->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(elem);
    }
    void sequence_input(const std::string& name, int elem, bool optional = false) {
        set_sequence_type(g->add_input(), name, elem, optional);
    }
    void sequence_output(const std::string& name, int elem, bool optional = false) {
        set_sequence_type(g->add_output(), name, elem, optional);
    }
    //! An optional tensor of `elem` and `dims`, as an input or an output.
    void optional_input(const std::string& name, int elem, const std::vector<int64_t>& dims) {
        onnx::ValueInfoProto tensor;
        set_type(&tensor, name, elem, dims);
        auto* v = g->add_input();
        v->set_name(name);
        *v->mutable_type()->mutable_optional_type()->mutable_elem_type() = tensor.type();
    }
    void optional_output(const std::string& name, int elem) {
        auto* v = g->add_output();
        v->set_name(name);
        v->mutable_type()
            ->mutable_optional_type()
            ->mutable_elem_type()
            ->mutable_tensor_type()
            ->set_elem_type(elem);
    }
    onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                          const std::vector<std::string>& outs) {
        auto* n = g->add_node();
        n->set_op_type(op);
        n->set_name(op + "_" + std::to_string(g->node_size()));
        for (auto& i : ins) n->add_input(i);
        for (auto& o : outs) n->add_output(o);
        return n;
    }
    onnx::TensorProto* initializer(const std::string& name, int elem,
                                   const std::vector<int64_t>& dims) {
        auto* t = g->add_initializer();
        t->set_name(name);
        t->set_data_type(elem);
        for (int64_t d : dims) t->add_dims(d);
        return t;
    }
    void set_opset(int64_t version) { model.mutable_opset_import(0)->set_version(version); }
    static void attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(v);
    }
    static void attr(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t i : v) a->add_ints(i);
    }
    //! An int64 initializer holding `values` (a 1-D tensor).
    void int64_initializer(const std::string& name, const std::vector<int64_t>& values) {
        auto* t = initializer(name, onnx::TensorProto::INT64, {int64_t(values.size())});
        for (int64_t v : values) t->add_int64_data(v);
    }
    std::vector<uint8_t> bytes() const {
        std::string s;
        model.SerializeToString(&s);
        return {s.begin(), s.end()};
    }
    void save(const fs::path& path) const {
        std::ofstream f(path, std::ios::binary);
        model.SerializeToOstream(&f);
    }
};

inline Tensor iota(const TensorShape& shape, float start = 0.f) {
    Tensor t(shape, dtype::Float32());
    std::iota(t.ptr<float>(), t.ptr<float>() + shape.total_nr_elems(), start);
    return t;
}

inline Tensor int64s(const std::vector<int64_t>& v) {
    Tensor t(TensorShape{v.size()}, dtype::Int64());
    std::copy(v.begin(), v.end(), t.ptr<int64_t>());
    return t;
}

//! Runs braid-run on `model` with `args` and one timed iteration; its exit status and its
//! output (stdout and stderr).
inline std::pair<int, std::string> run_braid_run(const fs::path& model, const std::string& args) {
    std::string cmd =
        std::string(BRAID_RUN_PATH) + " " + model.string() + " " + args + " --iter 1 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int status = ::pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

struct TempDir {
    fs::path path = fs::temp_directory_path() /
                    ("braid_onnx_" + std::to_string(::getpid()) + "_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

} // namespace braid::testing
