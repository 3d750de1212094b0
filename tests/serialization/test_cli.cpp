// braid-run and braid-inspect as a user runs them: each flag, and the exit status and one-line
// message of each kind of error.
#include "base/cpu_isa.h"
#include "base/hash.h"
#include "comm/rendezvous_server.h"
#include "helpers.h"
#include "model_patch.h"
#include "serialization/npy.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace braid;
using namespace braid::test;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

const std::string RUN = BRAID_RUN_PATH;
const std::string INSPECT = BRAID_INSPECT_PATH;
const std::string MLP = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/mlp.braid";
const std::string TRANSFORMER = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/transformer_block.braid";
const std::string DP = std::string(BRAID_EXAMPLE_MODELS_DIR) + "/dp_allreduce.braid";

using Result = ToolResult;

Result run(const std::string& binary, const std::vector<std::string>& args,
           const std::vector<std::string>& env = {}) {
    return run_tool(binary, args, env);
}

//! The value of "key":"..." in a JSON text (first occurrence).
std::string json_string(const std::string& json, const std::string& key) {
    auto at = json.find("\"" + key + "\":\"");
    if (at == std::string::npos) return "";
    at += key.size() + 4;
    return json.substr(at, json.find('"', at) - at);
}

std::string checksum_of(const Tensor& t) {
    Tensor c = t.contiguous();
    return fmt::format("{:016x}", xxhash64(c.raw_ptr(), c.nr_bytes()));
}

//! Expects a failure with `status` and one stderr line containing `message`.
void expect_error(const Result& r, int status, const std::string& message) {
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_EQ(r.err_lines(), 1u) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
}

} // namespace

TEST(BraidRunCli, DefaultRunPrintsTimingsAndOutputs) {
    auto r = run(RUN, {MLP});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_THAT(r.out, HasSubstr("load: "));
    EXPECT_THAT(r.out, HasSubstr("input x: random float32 {64,784} (model shape {-1,784})"));
    EXPECT_THAT(r.out, HasSubstr("iterations: 10 after 1 warm-up"));
    EXPECT_THAT(r.out, HasSubstr("time per iteration (ms): min "));
    for (auto* stat : {"median", "mean", "p90", "p99", "max"}) EXPECT_THAT(r.out, HasSubstr(stat));
    EXPECT_THAT(r.out, HasSubstr("output logits: float32 {64,10} checksum "));
    EXPECT_THAT(r.out, HasSubstr("first values: "));
}

TEST(BraidRunCli, JsonHoldsTheSameFactsAndMatchesAnInProcessRun) {
    TempDir dir;
    Tensor x = random_input({5, 784}, 9);
    write_npy(dir.file("x.npy"), x);
    auto r = run(
        RUN, {MLP, "--json", "--iter", "3", "--warmup", "0", "--input", "x=" + dir.file("x.npy")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, StartsWith("{"));
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1); // one object, one line
    for (auto* key : {"\"load_ms\":", "\"compile_ms\":", "\"latency_ms\":{\"min\":", "\"median\":",
                      "\"p90\":", "\"p99\":", "\"outputs\":[{\"name\":\"logits\"",
                      "\"shape\":[5,10]", "\"first_values\":["})
        EXPECT_THAT(r.out, HasSubstr(key));
    auto iters = r.out.substr(r.out.find("\"iteration_ms\":["));
    iters = iters.substr(0, iters.find(']'));
    EXPECT_EQ(std::count(iters.begin(), iters.end(), ','), 2); // 3 samples

    auto model = load(MLP);
    auto exec = model.compile();
    exec->feed("x", x).run();
    EXPECT_EQ(json_string(r.out, "checksum"), checksum_of(exec->output(0)));
}

// Float32 GEMMs go to OpenBLAS only where its kernels match the instruction set braid uses:
// forced to its generic Prescott kernels, it is left out (docs/performance.md, "GEMM").
TEST(BraidRunCli, GemmLibraryFollowsWhatOpenBlasRunsOnThisCpu) {
    if (cpu_isa_detected() < CpuIsa::AVX2) GTEST_SKIP() << "the CPU lacks AVX2";
    auto rule = [&](const char* core) {
        auto r = run(RUN, {MLP, "--json", "--iter", "1", "--warmup", "0"},
                     {std::string("OPENBLAS_CORETYPE=") + core, "BRAID_MAX_CPU_ISA=avx2"});
        EXPECT_EQ(r.status, 0) << r.err;
        return json_string(r.out, "gemm_library");
    };
    std::string generic = rule("Prescott"), tuned = rule("Haswell");
    if (generic.find("oneDNN") == std::string::npos)
        GTEST_SKIP() << "built without oneDNN: " << generic;
    if (generic.find("Prescott") == std::string::npos)
        GTEST_SKIP() << "this OpenBLAS ignores OPENBLAS_CORETYPE: " << generic;
    EXPECT_EQ(generic, "oneDNN (OpenBLAS runs its Prescott kernels, braid's kernels use avx2)");
    EXPECT_THAT(tuned, HasSubstr("OpenBLAS (Haswell kernels) below"));
}

TEST(BraidRunCli, TransformerBlockRunsAtItsDefaultAndAnotherSequenceLength) {
    auto r = run(RUN, {TRANSFORMER, "--json", "--iter", "2"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (auto* key : {"\"operators\":43,", "\"parameter_tensors\":16,", "\"load_ms\":",
                      "\"inputs\":[{\"name\":\"x\",\"source\":\"random\",\"dtype\":\"float32\","
                      "\"shape\":[128,256]}]",
                      "\"outputs\":[{\"name\":\"y\",\"dtype\":\"float32\",\"shape\":[128,256]"})
        EXPECT_THAT(r.out, HasSubstr(key));

    TempDir dir;
    Tensor x = random_input({16, 256}, 12);
    write_npy(dir.file("x.npy"), x);
    auto s = run(RUN, {TRANSFORMER, "--json", "--iter", "1", "--input", "x=" + dir.file("x.npy")});
    ASSERT_EQ(s.status, 0) << s.err;
    EXPECT_THAT(s.out, HasSubstr("\"shape\":[16,256]"));
    LoadOptions opt;
    opt.input_shapes["x"] = TensorShape{16, 256};
    auto model = load(TRANSFORMER, opt);
    auto exec = model.compile();
    exec->feed("x", x).run();
    EXPECT_EQ(json_string(s.out, "checksum"), checksum_of(exec->output(0)));
}

TEST(BraidRunCli, ThreadsCompNodeMemoryPlanAndDevicesFlags) {
    auto r = run(RUN, {MLP, "--json", "--iter", "2", "--threads", "1", "--comp-node", "cpu:default",
                       "--no-mem-plan"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"kernel_threads\":1,"));
    EXPECT_THAT(r.out, HasSubstr("\"comp_node\":\"cpu:default\""));
    EXPECT_THAT(r.out, HasSubstr("\"memory_plan\":false"));

    auto d = run(RUN, {MLP, "--json", "--iter", "2", "--devices", "2"});
    ASSERT_EQ(d.status, 0) << d.err;
    EXPECT_THAT(d.out, HasSubstr("\"devices\":2"));
    EXPECT_THAT(d.out, HasSubstr("\"ranks\":[{\"rank\":0,\"comp_node\":\"cpu0\""));
    EXPECT_THAT(d.out, HasSubstr("{\"rank\":1,\"comp_node\":\"cpu1\""));

    auto s = run(RUN, {MLP, "--iter", "1", "--server", "127.0.0.1:29500", "--rank", "1",
                       "--world-size", "2"});
    ASSERT_EQ(s.status, 0) << s.err;
    EXPECT_THAT(s.out, HasSubstr("rank 1 of 2 (local backend, server 127.0.0.1:29500)"));
}

TEST(BraidRunCli, FourRanksAsThreadsGiveFourTimesTheSingleRankOutput) {
    TempDir dir;
    auto inputs = write_dp_inputs(dir);
    auto args = [&](const std::string& devices, const std::string& out) {
        std::vector<std::string> a = {DP,          "--json", "--iter",       "2",
                                      "--devices", devices,  "--output-dir", dir.file(out)};
        a.insert(a.end(), inputs.begin(), inputs.end());
        return a;
    };
    auto one = run(RUN, args("1", "one"));
    ASSERT_EQ(one.status, 0) << one.err;
    auto four = run(RUN, args("4", "four"));
    ASSERT_EQ(four.status, 0) << four.err;
    expect_scaled_outputs(dir.file("one"), dir.file("four"), 4.f);

    // --json holds every rank's outputs: all-reduced, so equal on every rank.
    EXPECT_THAT(four.out, HasSubstr("\"devices\":4"));
    auto ranks = four.out.substr(four.out.find("\"ranks\":["));
    std::string loss0;
    for (int r = 0; r < 4; ++r) {
        auto at = ranks.find(fmt::format("{{\"rank\":{},\"comp_node\":\"cpu{}\"", r, r));
        ASSERT_NE(at, std::string::npos) << "rank " << r << " in " << four.out;
        auto sum = json_string(ranks.substr(at), "checksum"); // its first output: loss
        if (r == 0) loss0 = sum;
        EXPECT_EQ(sum, loss0) << "rank " << r;
    }
    Tensor loss = read_npy(dir.file("four/loss.npy"));
    EXPECT_EQ(json_string(four.out, "checksum"), checksum_of(loss));

    auto text = run(RUN, {DP, "--iter", "1", "--devices", "2"});
    ASSERT_EQ(text.status, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr("devices: 2 (ranks as threads, in-process group manager)"));
    EXPECT_THAT(text.out, HasSubstr("rank 1 output grad_w2: float32 {32,10} checksum "));
    EXPECT_THAT(text.out, HasSubstr("(same as rank 0)"));
}

TEST(BraidRunCli, ServerRankAndWorldSizeJoinARunningServer) {
    comm::ServerOptions options;
    options.token = "braid-run-test";
    comm::RendezvousServer server(options);
    std::string address = fmt::format("127.0.0.1:{}", server.start());
    TempDir dir;
    auto inputs = write_dp_inputs(dir);
    auto args = [&](std::vector<std::string> a) {
        a.insert(a.begin(), DP);
        a.insert(a.end(), inputs.begin(), inputs.end());
        return a;
    };
    auto alone = run(RUN, args({"--iter", "1", "--output-dir", dir.file("alone")}));
    ASSERT_EQ(alone.status, 0) << alone.err;
    // Rank 0 of 1 registers its collectives with the server: with its token it runs ...
    auto joined = run(RUN,
                      args({"--iter", "1", "--server", address, "--rank", "0", "--world-size", "1",
                            "--output-dir", dir.file("joined")}),
                      {"BRAID_TOKEN=braid-run-test"});
    ASSERT_EQ(joined.status, 0) << joined.err;
    EXPECT_THAT(joined.out, HasSubstr("rank 0 of 1 (local backend, server " + address + ")\n"));
    expect_scaled_outputs(dir.file("alone"), dir.file("joined"), 1.f);
    // ... and without it the server turns it away.
    auto refused =
        run(RUN, args({"--iter", "1", "--server", address, "--rank", "0", "--world-size", "1"}),
            {"BRAID_TOKEN=wrong"});
    expect_error(refused, 4, "authentication failed");
    // Ranks in processes of their own cannot share memory: the local backend is refused.
    expect_error(run(RUN, args({"--server", address, "--rank", "1", "--world-size", "2"})), 2,
                 "rank 1 of 2: the local backend runs ranks as threads of one process");
}

TEST(BraidRunCli, RandomShapeOutputDirProfileAndMemReport) {
    TempDir dir;
    // --no-fusion: the trace names the operators as built (MatMul, not FusedMatMul).
    auto r =
        run(RUN, {MLP, "--iter", "2", "--input", "x=random:4x784", "--output-dir", dir.file("out"),
                  "--profile", dir.file("trace.json"), "--mem-report", "--no-fusion"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("input x: random:4x784 float32 {4,784}"));
    Tensor logits = read_npy(dir.file("out/logits.npy"));
    EXPECT_EQ(logits.shape(), (TensorShape{4, 10}));
    EXPECT_THAT(r.out, HasSubstr("checksum " + checksum_of(logits)));
    auto trace = read_file(dir.file("trace.json"));
    std::string text(trace.begin(), trace.end());
    EXPECT_THAT(text, HasSubstr("\"traceEvents\":["));
    EXPECT_THAT(text, HasSubstr("\"ph\":\"X\",\"name\":\"MatMul \\\"MatMul"));
    EXPECT_THAT(text, HasSubstr("\"name\":\"iteration 1\""));
    EXPECT_THAT(r.out, HasSubstr("memory"));
    EXPECT_THAT(r.out, HasSubstr("cpu:default: "));
}

TEST(BraidRunCli, ProcessMemoryIsReportedAgainstWhatTheRunNeeds) {
    auto r = run(RUN, {MLP, "--json", "--iter", "2", "--input", "x=random:4x784"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    const auto& p = j.at("process_memory");
    size_t params = j.at("parameter_bytes"), constants = p.at("constants");
    // The parameters, and the few scalar constants the graph adds.
    EXPECT_GE(constants, params);
    EXPECT_LT(constants, params + 4096);
    size_t arena = p.at("arena"), own = p.at("own_allocations"), need = p.at("need");
    EXPECT_GT(arena, 0u);
    EXPECT_EQ(need, constants + arena + own + 4 * 784 * sizeof(float));
    EXPECT_TRUE(p.at("need_counts_subgraphs").get<bool>());
    const auto &before = p.at("before_load"), &after = p.at("after_run");
    EXPECT_GT(size_t(before.at("rss")), 0u);
    EXPECT_GE(size_t(after.at("peak_rss")), size_t(after.at("rss")));
    EXPECT_GE(size_t(after.at("peak_rss")), size_t(before.at("rss")));
    EXPECT_LE(size_t(after.at("jit_code")), size_t(after.at("anon")));
    EXPECT_GT(size_t(after.at("anon")), 0u);
    EXPECT_GT(size_t(after.at("file")), 0u);

    auto t = run(RUN, {MLP, "--iter", "1", "--mem-report"});
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_THAT(t.out, HasSubstr("resident before loading, peak "));
    EXPECT_THAT(t.out, HasSubstr("(parameters and constants, arena, own allocations, inputs)"));
}

TEST(BraidRunCli, UsageErrorsExitWithStatus2) {
    expect_error(run(RUN, {}), 2, "braid-run: error: model is required");
    expect_error(run(RUN, {MLP, "--bogus"}), 2, "--bogus");
    expect_error(run(RUN, {MLP, "--iter", "0"}), 2, "--iter");
    expect_error(run(RUN, {MLP, "--comp-node", "gpu7"}), 2, "invalid comp node locator \"gpu7\"");
    expect_error(run(RUN, {MLP, "--input", "y=random"}), 2,
                 "--input y: the model has no input named \"y\" (inputs: x)");
    expect_error(run(RUN, {MLP, "--input", "x=random:4x783"}), 2,
                 "shape {4,783} does not fit the model's {-1,784}");
    expect_error(run(RUN, {MLP, "--input", "x=random:4xq"}), 2, "bad shape \"4xq\"");
    expect_error(run(RUN, {MLP, "--devices", "2", "--server", "h:1"}), 2, "excludes");
    expect_error(run(RUN, {MLP, "--server", "localhost", "--rank", "0", "--world-size", "2"}), 2,
                 "expected HOST:PORT");
    expect_error(run(RUN, {MLP, "--server", "h:1", "--rank", "2", "--world-size", "2"}), 2,
                 "--rank 2 is out of range for --world-size 2");
    expect_error(run(RUN, {MLP, "--backend", "tcp"}), 2, "--backend");
    // Multi-rank flags that do not go together.
    expect_error(run(RUN, {DP, "--rank", "1"}), 2, "--rank needs --world-size N");
    expect_error(run(RUN, {DP, "--world-size", "2"}), 2, "--world-size needs --rank R");
    expect_error(run(RUN, {DP, "--rank", "0", "--world-size", "2"}), 2,
                 "--rank and --world-size need --server HOST:PORT");
    expect_error(run(RUN, {DP, "--server", "127.0.0.1:1"}), 2,
                 "--server needs --rank R and --world-size N");
    expect_error(run(RUN, {DP, "--devices", "2", "--rank", "0"}), 2,
                 "--devices runs every rank in this process");
    expect_error(run(RUN, {DP, "--devices", "2", "--backend", "mpi"}), 2,
                 "--backend mpi runs one rank per process");
    expect_error(
        run(RUN, {DP, "--backend", "mpi"}, {"-u", "OMPI_COMM_WORLD_RANK", "-u", "PMI_RANK"}), 2,
        "--backend mpi: no MPI launcher environment");
    expect_error(run(RUN, {DP, "--devices", "0"}), 2, "--devices");
}

TEST(BraidRunCli, BadModelAndInputFilesExitWithStatus3) {
    TempDir dir;
    expect_error(run(RUN, {dir.file("missing.braid")}), 3, "missing.braid: cannot open");
    write_file(dir.file("empty.braid"), {});
    expect_error(run(RUN, {dir.file("empty.braid")}), 3, "empty file (0 bytes)");
    auto bytes = read_file(MLP);
    auto flipped = bytes;
    flipped[flipped.size() / 2] ^= 4;
    write_file(dir.file("flipped.braid"), flipped);
    expect_error(run(RUN, {dir.file("flipped.braid")}), 3, "checksum mismatch");
    write_file(dir.file("cut.braid"), {bytes.begin(), bytes.begin() + 1000});
    expect_error(run(RUN, {dir.file("cut.braid")}), 3, "truncated");
    auto renamed = bytes;
    rename_operator_type(renamed, "MatMul", "MatMux");
    write_file(dir.file("unknown.braid"), renamed);
    expect_error(run(RUN, {dir.file("unknown.braid")}), 3, "unknown operator type \"MatMux\"");

    // Input files: Fortran order, unsupported dtype, wrong dtype, wrong shape.
    Tensor x = random_input({2, 784}, 1);
    auto npy = encode_npy(x);
    std::string header(npy.begin(), npy.begin() + 64);
    auto fortran = npy;
    auto at = header.find("False");
    std::memcpy(fortran.data() + at, "True ", 5);
    write_file(dir.file("f.npy"), fortran);
    expect_error(run(RUN, {MLP, "--input", "x=" + dir.file("f.npy")}), 3,
                 "input \"x\": " + dir.file("f.npy") + ": Fortran-order arrays are not supported");
    auto c8 = npy;
    std::memcpy(c8.data() + header.find("<f4"), "<c8", 3);
    write_file(dir.file("c8.npy"), c8);
    expect_error(run(RUN, {MLP, "--input", "x=" + dir.file("c8.npy")}), 3,
                 "dtype '<c8' is not supported");
    write_npy(dir.file("d.npy"), Tensor(TensorShape{2, 784}, dtype::Float64()));
    expect_error(run(RUN, {MLP, "--input", "x=" + dir.file("d.npy")}), 3,
                 "holds float64, the model expects float32");
    write_npy(dir.file("i.npy"), Tensor(TensorShape{2, 784}, dtype::Int32()));
    expect_error(run(RUN, {MLP, "--input", "x=" + dir.file("i.npy")}), 3,
                 "holds int32, the model expects float32");
    write_npy(dir.file("s.npy"), random_input({2, 783}, 1));
    expect_error(run(RUN, {MLP, "--input", "x=" + dir.file("s.npy")}), 3,
                 "has shape {2,783}, the model expects {-1,784}");
}

TEST(BraidRunCli, KernelFailureExitsWithStatus4) {
    TempDir dir;
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "n", dtype::Int32(), {64});
    dump({opr::floor_div(x, x).rename("q")}, dir.file("div.braid"));
    // Random int inputs are in [0, 9]: 64 of them include a zero.
    expect_error(run(RUN, {dir.file("div.braid"), "--iter", "1"}), 4, "division by zero");
}

TEST(BraidInspectCli, SummaryDotAndErrors) {
    auto r = run(INSPECT, {MLP});
    ASSERT_EQ(r.status, 0) << r.err;
    for (auto* s : {"format: 1.0", "x: float32 {-1,784} (default {64,784})",
                    "logits: float32 {64,10}", "MatMul", "SharedParam",
                    "parameters: 4 tensors, "
                    "814120 bytes",
                    "w1                       float32 {784,256}", "memory"})
        EXPECT_THAT(r.out, HasSubstr(s));
    auto d = run(INSPECT, {MLP, "--dot"});
    ASSERT_EQ(d.status, 0);
    EXPECT_THAT(d.out, StartsWith("digraph model {"));
    EXPECT_THAT(d.out, HasSubstr("-> out0"));

    TempDir dir;
    auto renamed = read_file(MLP);
    rename_operator_type(renamed, "MatMul", "MatMux");
    write_file(dir.file("unknown.braid"), renamed);
    // What the file holds is shown; that this build cannot load it is an error.
    auto u = run(INSPECT, {dir.file("unknown.braid")});
    EXPECT_EQ(u.status, 3) << u.err;
    EXPECT_THAT(u.out, HasSubstr("MatMux"));
    EXPECT_THAT(u.err, HasSubstr("unknown operator type \"MatMux\""));
    write_file(dir.file("junk.braid"), {1, 2, 3, 4, 5, 6, 7, 8, 9});
    expect_error(run(INSPECT, {dir.file("junk.braid")}), 3, "wrong file identifier");
    expect_error(run(INSPECT, {MLP, "--frobnicate"}), 2, "--frobnicate");
}

TEST(BraidInspectCli, ListsTheSubgraphsOfIfAndLoopNested) {
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 3});
    auto p = opr::Input::make(*g, "p", dtype::Bool(), {});
    auto n = opr::Input::make(*g, "n", dtype::Int64(), {});
    auto y = opr::cond(
        p, {x, n},
        [](ComputingGraph&, const SymbolVarArray& in) {
            return opr::loop(in[1], SymbolVar(), {in[0]}, {},
                             [](ComputingGraph&, SymbolVar, SymbolVar c,
                                const SymbolVarArray& carried, const SymbolVarArray&) {
                                 return SymbolVarArray{c, opr::relu(carried[0]) * 2.0};
                             });
        },
        [](ComputingGraph&, const SymbolVarArray& in) { return SymbolVarArray{-in[0]}; },
        OperatorConfig("choose"))[0];
    TempDir dir;
    dump({y.rename("y")}, dir.file("if.braid"));
    auto r = run(INSPECT, {dir.file("if.braid")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("subgraphs:\n  If \"choose\" then: "));
    EXPECT_THAT(r.out, HasSubstr("  If \"choose\" else: 2 operators (Elemwise 1, Input 1)"));
    EXPECT_THAT(r.out, HasSubstr("\n    Loop \""));
    EXPECT_THAT(r.out, HasSubstr(" body: "));
}

TEST(BraidRunCli, TrainingModelRunsAtBatchSizesOtherThanItsBuildSize) {
    // dp_allreduce declares x {-1, 16} and label {-1}; it was built at batch 8.
    for (const char* batch : {"1", "7", "13"}) {
        auto r = run(RUN, {DP, "--input", std::string("x=random:") + batch + "x16", "--input",
                           std::string("label=random:") + batch, "--iter", "2"});
        EXPECT_EQ(r.status, 0) << "batch " << batch << ": " << r.err;
    }
}

TEST(BraidRunCli, Float64ModelReadsAndWritesF8Npy) {
    TempDir dir;
    auto g = ComputingGraph::make();
    auto x = opr::Input::make(*g, "x", dtype::Float64(), {3});
    dump({(x * 3.0 + 1e-12).rename("y")}, dir.file("f64.braid"));
    Tensor xv(TensorShape{3}, dtype::Float64());
    for (int i = 0; i < 3; ++i) xv.ptr<double>()[i] = 0.1 * i + 1e-15;
    write_npy(dir.file("x.npy"), xv);
    auto r = run(RUN, {dir.file("f64.braid"), "--input", "x=" + dir.file("x.npy"), "--iter", "1",
                       "--output-dir", dir.file("out")});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("output y: float64 {3}"));
    Tensor y = read_npy(dir.file("out") + "/y.npy");
    ASSERT_EQ(y.dtype(), dtype::Float64());
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(y.at(i), xv.at(i) * 3.0 + 1e-12) << i;
    // A random float64 input works too.
    auto rnd = run(RUN, {dir.file("f64.braid"), "--iter", "1"});
    ASSERT_EQ(rnd.status, 0) << rnd.err;
    EXPECT_THAT(rnd.out, HasSubstr("input x: random float64 {3}"));
}
