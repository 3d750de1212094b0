// Runs the ONNX backend test data (Debian's libonnx-testdata) through the embedding API, as a
// user runs a model (nothing bound at import), and classifies every case: pass, wrong (a result
// outside rtol 1e-3 / atol 1e-7), unsupported (naming the op and opset), error, or crash / timeout
// (each case runs in a child process).
//
//   onnx_conformance <data dir> <json out> [<floor file>] [--filter SUBSTRING] [--sample N]
//
// --sample N runs every N-th case of each suite (in name order) and checks no floor: the
// sanitizer builds' shorter run, which still fails on any crash or hang.
//
// Writes {"suites": {"node": {"total": N, "pass": N, ...}, ...}, "cases": {"node/test_abs":
// "pass", ...}, "shape_inputs": {...}, "reasons": {...}}; "shape_inputs" names, per passing case,
// the graph inputs the model read as shapes at run time (see embed::OnnxVariants). With a floor
// file ("suite pass-count" lines) it exits 1 when a suite passes fewer cases than its floor (the
// ratchet), never for unsupported cases.
#include "braid.h"
#include "embed/embed_internal.h"
#include "onnx_import/onnx_internal.h"

#include <onnx/onnx-data_pb.h>
#include <onnx/onnx_pb.h>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using namespace braid;

namespace {

enum Verdict { PASS = 0, WRONG = 10, UNSUPPORTED = 11, ERROR = 12 };

std::string read_all(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

//! The tensor in `p`. The test data store bfloat16 tensors as uint16 (NumPy has no bfloat16):
//! where the model's input or output at that position is bfloat16 (`bfloat16`), the bits are
//! read as such.
Tensor read_tensor(const fs::path& p, std::string* name, bool bfloat16 = false) {
    onnx::TensorProto t;
    if (!t.ParseFromString(read_all(p)))
        throw onnx_import::UnsupportedOnnxError(p.filename().string() +
                                                ": not a tensor (sequence or map data)");
    if (bfloat16 && t.data_type() == onnx::TensorProto::UINT16)
        t.set_data_type(onnx::TensorProto::BFLOAT16);
    if (name) *name = t.name();
    return onnx_import::tensor_of(t, p.parent_path().string(), p.filename().string());
}

//! A test data value: a tensor, a sequence of them, or an optional without a value.
struct DataValue {
    Tensor tensor;
    std::vector<Tensor> elements;
    bool sequence = false, none = false;
};

//! The value in `p` for a model input or output `io`, read by its kind (a TensorProto, a
//! SequenceProto, or an OptionalProto of either).
DataValue read_value(const fs::path& p, const ModelIO& io, std::string* name) {
    bool bf16 = io.dtype == dtype::BFloat16();
    if (io.kind == ValueKind::TENSOR) return {.tensor = read_tensor(p, name, bf16)};
    auto elements = [&](const onnx::SequenceProto& seq) {
        DataValue v{.sequence = true};
        if (seq.elem_type() != onnx::SequenceProto::TENSOR &&
            seq.elem_type() != onnx::SequenceProto::UNDEFINED)
            throw onnx_import::UnsupportedOnnxError(p.filename().string() +
                                                    ": a sequence of non-tensors");
        for (auto& t : seq.tensor_values()) {
            onnx::TensorProto e = t;
            if (bf16 && e.data_type() == onnx::TensorProto::UINT16)
                e.set_data_type(onnx::TensorProto::BFLOAT16);
            v.elements.push_back(
                onnx_import::tensor_of(e, p.parent_path().string(), p.filename().string()));
        }
        return v;
    };
    std::string bytes = read_all(p);
    if (io.kind == ValueKind::SEQUENCE) {
        onnx::SequenceProto seq;
        if (!seq.ParseFromString(bytes))
            throw std::runtime_error(p.filename().string() + ": not a sequence");
        if (name) *name = seq.name();
        return elements(seq);
    }
    onnx::OptionalProto opt;
    if (!opt.ParseFromString(bytes))
        throw std::runtime_error(p.filename().string() + ": not an optional");
    if (name) *name = opt.name();
    if (opt.has_sequence_value()) return elements(opt.sequence_value());
    if (opt.has_tensor_value()) {
        onnx::TensorProto e = opt.tensor_value();
        if (bf16 && e.data_type() == onnx::TensorProto::UINT16)
            e.set_data_type(onnx::TensorProto::BFLOAT16);
        return {.tensor =
                    onnx_import::tensor_of(e, p.parent_path().string(), p.filename().string())};
    }
    return {.none = true};
}

std::vector<float> as_floats(const Tensor& t) {
    std::vector<float> v(t.shape().total_nr_elems());
    convert_elements(t.dtype(), t.contiguous().raw_ptr(), dtype::Float32(), v.data(), v.size());
    return v;
}

//! Empty when equal within tolerance, else what differs.
std::string compare(const Tensor& got, const Tensor& want, const std::string& name) {
    if (got.dtype() != want.dtype())
        return fmt::format("output \"{}\": dtype {} vs expected {}", name, got.dtype().name(),
                           want.dtype().name());
    if (got.shape() != want.shape())
        return fmt::format("output \"{}\": shape {} vs expected {}", name, got.shape().to_string(),
                           want.shape().to_string());
    if (got.dtype().is_float()) {
        auto a = as_floats(got), b = as_floats(want);
        for (size_t i = 0; i < a.size(); ++i) {
            if (std::isnan(a[i]) && std::isnan(b[i])) continue;
            if (std::isinf(b[i]) && a[i] == b[i]) continue;
            if (!(std::fabs(a[i] - b[i]) <= 1e-7 + 1e-3 * std::fabs(b[i])))
                return fmt::format("output \"{}\"[{}]: {} vs expected {}", name, i, a[i], b[i]);
        }
        return {};
    }
    Tensor g = got.contiguous(), w = want.contiguous();
    // An empty tensor may have no memory at all (memcmp takes no null pointer, even for 0 bytes).
    if (g.nr_bytes() != 0 && std::memcmp(g.raw_ptr(), w.raw_ptr(), g.nr_bytes()) != 0)
        return fmt::format("output \"{}\": values differ", name);
    return {};
}

Tensor tensor_of_view(const embed::TensorView& v) {
    TensorShape s;
    s.set_ndim(v.shape.size());
    for (size_t d = 0; d < v.shape.size(); ++d) s[d] = size_t(v.shape[d]);
    braid::DType dt = embed::from_embed(v.dtype);
    Tensor t(s, dt);
    if (v.bytes) std::memcpy(t.raw_ptr(), v.data, v.bytes);
    return t;
}

//! Empty when output `io` of the last run of `ctx` equals `want` (compare()), else what differs.
std::string compare_output(embed::Context& ctx, const ModelIO& io, const DataValue& want) {
    if (want.none)
        return ctx.has_output(io.name)
                   ? fmt::format("output \"{}\": a value; expected an optional without one",
                                 io.name)
                   : "";
    if (!ctx.has_output(io.name))
        return fmt::format("output \"{}\": no value; expected one", io.name);
    if (!want.sequence) return compare(tensor_of_view(ctx.output(io.name)), want.tensor, io.name);
    auto got = ctx.sequence_output(io.name);
    if (got.size() != want.elements.size())
        return fmt::format("output \"{}\": {} elements; expected {}", io.name, got.size(),
                           want.elements.size());
    for (size_t k = 0; k < got.size(); ++k) {
        std::string why = compare(tensor_of_view(got[k]), want.elements[k],
                                  onnx_import::element_name(io.name, k));
        if (!why.empty()) return why;
    }
    return {};
}

//! Runs one case through the embedding API, as a user runs a model: loaded once, each data
//! set fed to a context, nothing bound at import. Returns its verdict, with the reason in `why`;
//! the graph inputs the model read as shapes at run time (imported per value: embed's
//! OnnxVariants) go to `shape_inputs`.
Verdict run_case(const fs::path& dir, std::string& why, std::string& shape_inputs) {
    try {
        fs::path file = dir / "model.onnx";
        std::vector<fs::path> sets;
        for (auto& e : fs::directory_iterator(dir))
            if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
                sets.push_back(e.path());
        std::sort(sets.begin(), sets.end());
        // An unsupported op is reported here, before any data is read.
        auto model = embed::open_model(file.string(), {}, true);
        auto& m = model->impl();
        for (auto& set : sets) {
            std::map<std::string, DataValue> feeds;
            for (size_t i = 0; fs::exists(set / fmt::format("input_{}.pb", i)); ++i) {
                std::string name;
                if (i >= m.input_io.size()) break; // reported by the run as not an input
                DataValue v = read_value(set / fmt::format("input_{}.pb", i), m.input_io[i], &name);
                if (name.empty()) name = m.input_io[i].name;
                feeds[name] = v;
            }
            auto ctx = model->create_context();
            for (size_t i = 0; i < m.input_io.size(); ++i) {
                auto it = feeds.find(m.input_io[i].name);
                if (it == feeds.end()) continue; // reported by the run as not bound
                DataValue& v = it->second;
                auto view = [](Tensor& t) {
                    t = t.contiguous();
                    auto dims = t.shape().dims();
                    return embed::TensorView{t.raw_ptr(), embed::to_embed(t.dtype()),
                                             std::vector<int64_t>(dims.begin(), dims.end()),
                                             t.nr_bytes()};
                };
                if (v.none) {
                    ctx->set_input_none(m.input_io[i].name);
                } else if (v.sequence) {
                    std::vector<embed::TensorView> views;
                    for (auto& e : v.elements) views.push_back(view(e));
                    ctx->set_sequence_input(m.input_io[i].name, views);
                } else {
                    auto t = view(v.tensor);
                    ctx->set_input(m.input_io[i].name, t.data, t.dtype, t.shape);
                }
            }
            ctx->impl().run({});
            for (size_t i = 0; i < m.output_io.size(); ++i) {
                fs::path p = set / fmt::format("output_{}.pb", i);
                if (!fs::exists(p)) continue;
                why = compare_output(*ctx, m.output_io[i], read_value(p, m.output_io[i], nullptr));
                if (!why.empty()) return WRONG;
            }
        }
        if (m.variants)
            for (auto& name : m.variants->shape_inputs())
                shape_inputs += (shape_inputs.empty() ? "" : ",") + name;
        return PASS;
    } catch (const onnx_import::UnsupportedOnnxError& e) {
        why = e.what();
        return UNSUPPORTED;
    } catch (const embed::Error& e) {
        why = e.what();
        return ERROR;
    } catch (const std::exception& e) {
        why = e.what();
        return ERROR;
    }
}

//! Runs the case in a child process (a crash or a hang is a verdict, not the end of the run).
//! The child leads its own process group, so that a process it started and left behind is
//! stopped with it rather than holding the pipe open.
std::string run_isolated(const fs::path& dir, std::string& why) {
    constexpr int CASE_LIMIT_S = 60;
    int fds[2];
    if (pipe(fds) != 0) return "error";
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        close(fds[0]);
        alarm(CASE_LIMIT_S);
        std::string w, shape_inputs;
        Verdict v = run_case(dir, w, shape_inputs);
        // The reason, or for a pass the shape inputs it read ("shape:a,b").
        w = v == PASS ? (shape_inputs.empty() ? "" : "shape:" + shape_inputs) : w.substr(0, 400);
        if (write(fds[1], w.data(), w.size()) < 0) {
        }
        _exit(int(v));
    }
    setpgid(pid, pid); // also here: whichever runs first
    close(fds[1]);
    char buf[512];
    why.clear();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(CASE_LIMIT_S + 10);
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        pollfd p{fds[0], POLLIN, 0};
        if (left.count() <= 0 || poll(&p, 1, int(left.count())) == 0) break;
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        why.append(buf, size_t(n));
    }
    close(fds[0]);
    kill(-pid, SIGKILL); // whatever of the case is left
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        why = strsignal(WTERMSIG(status));
        // SIGKILL: the case outlived its alarm (above).
        return WTERMSIG(status) == SIGALRM || WTERMSIG(status) == SIGKILL ? "timeout" : "crash";
    }
    switch (WEXITSTATUS(status)) {
    case PASS:
        return "pass";
    case WRONG:
        return "wrong";
    case UNSUPPORTED:
        return "unsupported";
    default:
        return "error";
    }
}

std::string json_str(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\')
            r += '\\', r += c;
        else if (c == '\n')
            r += "\\n";
        else if (static_cast<unsigned char>(c) < 0x20)
            r += ' ';
        else
            r += c;
    }
    return r + "\"";
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::cerr << "usage: onnx_conformance <data dir> <json out> [<floor file>] [--filter S] "
                     "[--sample N]\n";
        return 2;
    }
    fs::path data = argv[1];
    std::string out = argv[2], floor_file, filter;
    int sample = 1;
    for (int i = 3; i < argc; ++i) {
        if (std::string(argv[i]) == "--filter" && i + 1 < argc)
            filter = argv[++i];
        else if (std::string(argv[i]) == "--sample" && i + 1 < argc)
            sample = std::max(1, std::atoi(argv[++i]));
        else
            floor_file = argv[i];
    }
    setenv("BRAID_LOG_LEVEL", "off", 0);
    std::map<std::string, std::map<std::string, int>> suites;
    std::map<std::string, std::string> cases, reasons, shape_inputs;
    for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
        if (!fs::exists(data / suite)) continue;
        std::vector<fs::path> dirs;
        for (auto& e : fs::directory_iterator(data / suite))
            if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
        std::sort(dirs.begin(), dirs.end());
        for (size_t index = 0; index < dirs.size(); ++index) {
            if (index % size_t(sample) != 0) continue;
            const fs::path& d = dirs[index];
            std::string key = std::string(suite) + "/" + d.filename().string();
            if (!filter.empty() && key.find(filter) == std::string::npos) continue;
            std::string why, verdict = run_isolated(d, why);
            cases[key] = verdict;
            if (verdict == "pass" && !why.empty()) {
                shape_inputs[key] = why.substr(6);
                suites[suite]["pass_reading_shape_inputs"]++;
            } else if (!why.empty()) {
                reasons[key] = why;
            }
            suites[suite]["total"]++;
            suites[suite][verdict]++;
        }
    }
    std::ofstream js(out);
    js << "{\"suites\": {";
    bool first = true;
    for (auto& [suite, counts] : suites) {
        js << (first ? "" : ", ") << json_str(suite) << ": {";
        first = false;
        bool f2 = true;
        for (const char* k : {"total", "pass", "pass_reading_shape_inputs", "wrong", "unsupported",
                              "error", "crash", "timeout"}) {
            js << (f2 ? "" : ", ") << "\"" << k << "\": " << counts[k];
            f2 = false;
        }
        js << "}";
    }
    js << "}, \"cases\": {";
    first = true;
    for (auto& [k, v] : cases) {
        js << (first ? "" : ", ") << json_str(k) << ": " << json_str(v);
        first = false;
    }
    js << "}, \"shape_inputs\": {";
    first = true;
    for (auto& [k, v] : shape_inputs) {
        js << (first ? "" : ", ") << json_str(k) << ": " << json_str(v);
        first = false;
    }
    js << "}, \"reasons\": {";
    first = true;
    for (auto& [k, v] : reasons) {
        js << (first ? "" : ", ") << json_str(k) << ": " << json_str(v);
        first = false;
    }
    js << "}}\n";

    int status = 0, total = 0, pass = 0, crashes = 0;
    for (auto& [suite, counts] : suites) {
        std::printf("%-18s %4d cases: %4d pass, %4d wrong, %4d unsupported, %4d error, %d crash, "
                    "%d timeout\n",
                    suite.c_str(), counts["total"], counts["pass"], counts["wrong"],
                    counts["unsupported"], counts["error"], counts["crash"], counts["timeout"]);
        total += counts["total"], pass += counts["pass"];
        crashes += counts["crash"] + counts["timeout"];
    }
    int nshape = 0;
    for (auto& [suite, counts] : suites) nshape += counts["pass_reading_shape_inputs"];
    std::printf("all %d cases: %d pass, nothing bound (%.1f%%; %d of them read shape inputs at "
                "run time), %d crashes or timeouts\n",
                total, pass, total ? 100.0 * pass / total : 0.0, nshape, crashes);
    if (!floor_file.empty() && sample == 1) {
        std::ifstream f(floor_file);
        std::string suite;
        int floor_pass;
        while (f >> suite >> floor_pass) {
            if (suite[0] == '#') {
                std::getline(f, suite);
                continue;
            }
            int got = suites.count(suite) ? suites[suite]["pass"] : 0;
            if (got < floor_pass) {
                std::printf("FAIL: %s passes %d cases, below its floor of %d (%s)\n", suite.c_str(),
                            got, floor_pass, floor_file.c_str());
                status = 1;
            }
        }
    }
    if (crashes) {
        std::printf("FAIL: %d cases crashed or timed out\n", crashes);
        status = 1;
    }
    return status;
}
