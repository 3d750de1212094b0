// What braid-run does, separated from its flag parsing: load a model, prepare its inputs, run
// it N times, collect timings, outputs, a profile and a memory report. Single-rank and
// multi-rank runs share run_rank(); run_model() picks how many ranks run and where.
#pragma once

#include "braid.h"
#include "tools/mem_summary.h"
#include "tools/process_memory.h"

#include <chrono>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace braid::tools {

//! Exit statuses of braid-run and braid-inspect.
enum ExitCode : int {
    EXIT_OK = 0,
    EXIT_USAGE = 2,      //!< bad flags or flag values
    EXIT_BAD_FILE = 3,   //!< a model or input file that cannot be used
    EXIT_RUN_FAILED = 4, //!< a failure while compiling or running
};

//! An error that ends the tool with `exit_code`; its message is one line.
class ToolError : public std::runtime_error {
public:
    ToolError(int exit_code, const std::string& msg)
        : std::runtime_error(msg), m_exit_code(exit_code) {}
    int exit_code() const { return m_exit_code; }

private:
    int m_exit_code;
};

//! An --input flag: NAME=FILE.npy, NAME=random or NAME=random:2x3.
struct InputSpec {
    std::string name;
    std::string file;                 //!< empty for random
    std::optional<TensorShape> shape; //!< random:SHAPE
    //! A sequence input's elements, one file each (NAME=A.npy,B.npy: `file` holds the list).
    std::vector<std::string> files;
    bool none = false; //!< NAME=none: an optional input without a value
};

//! Every braid-run setting.
struct RunConfig {
    std::string model_path;
    std::vector<InputSpec> inputs;
    size_t iterations = 10;
    size_t warmup = 1;
    size_t threads = 0;    //!< 0: keep the default (BRAID_NUM_THREADS or the hardware threads)
    std::string comp_node; //!< empty: cpu:default (cpu0 and up for --devices N)
    std::string output_dir;
    bool json = false;
    std::string profile_path;
    bool mem_report = false;
    bool mem_plan = true;
    //! GraphOptions::enable_fusion (compile-time fusion, graph/graph_pass.h).
    bool fusion = true;
    //! GraphOptions::deterministic (docs/determinism.md); also on under BRAID_DETERMINISTIC=1.
    bool deterministic = deterministic_from_env();
    size_t memory_budget = 0; //!< bytes; 0: BRAID_MEMORY_BUDGET, else physical memory
    uint32_t seed = 0;        //!< of random inputs
    // Multi-rank.
    size_t devices = 1;
    std::string server; //!< host:port of the group manager
    int rank = -1;
    int world_size = 0;
    std::string backend; //!< local, mpi, gloo, nccl; empty: local (gloo under braid-launch)
    //! Rank, world size and server came from braid-launch's environment (rank 0 reports).
    bool launched = false;
    //! ONNX shape inputs bound at import (--bind).
    std::map<std::string, Tensor> bound_inputs;
};

//! Parses "4x784" (or "4,784"); throws ToolError(EXIT_USAGE) naming `what`.
TensorShape parse_shape(const std::string& text, const std::string& what);
//! Parses one --input value; throws ToolError(EXIT_USAGE).
InputSpec parse_input_spec(const std::string& text);
//! Parses one --bind value, NAME=V0,V1,... (int64 values, or float32 when one has a point or
//! an exponent) or NAME=FILE.npy; throws ToolError (EXIT_USAGE, or EXIT_BAD_FILE for a file
//! that cannot be read).
std::pair<std::string, Tensor> parse_binding(const std::string& text);

//! One fed input, as resolved.
struct ResolvedInput {
    std::string name;
    std::string source; //!< "random", "random:4x784", the file, the files, or "none"
    Tensor value;
    std::vector<Tensor> elements; //!< a sequence input's (`sequence`)
    bool sequence = false;
    bool none = false;       //!< an optional input without a value
    std::string model_shape; //!< "{-1,784}"
    //! "float32 {4,784}", "sequence of 2 float32" or "none", for the report.
    std::string description() const;
};

//! One timed operator execution (for --profile).
struct TraceEvent {
    std::string name;
    std::string type;
    std::string comp_node;
    int rank = 0;
    double begin_us = 0, duration_us = 0;
};

//! What one rank produced.
struct RankResult {
    int rank = 0;
    std::string comp_node;
    double load_ms = 0, compile_ms = 0;
    std::vector<double> iteration_ms;
    std::vector<std::pair<std::string, Tensor>> outputs; //!< name, host copy
    std::vector<TraceEvent> trace;
    std::string memory_report; //!< empty unless --mem-report
    bool planner_report = false;
    size_t constant_bytes = 0; //!< the graph's parameters and constants, each once
    //! Whether the graph has subgraphs (If, Loop): their constants and arenas are not counted.
    bool has_subgraphs = false;
    size_t arena_bytes = 0;          //!< held by the memory plan, every comp node
    size_t own_allocation_bytes = 0; //!< fetched outputs kept apart from the arena
    ProcessMemory memory;            //!< the process after the last iteration (model alive)
};

//! Everything braid-run reports.
struct RunResult {
    ModelInfo info;
    std::vector<ResolvedInput> inputs;
    std::vector<RankResult> ranks;
    size_t kernel_threads = 0;
    int rank = -1, world_size = 0; //!< this process's rank (--server / --backend mpi)
    std::string note;              //!< one informational line, may be empty
    size_t collectives = 0;        //!< CollectiveComm operators in the model
    //! Whether this process prints the report and writes --output-dir (under --backend mpi,
    //! MPI rank 0 alone does).
    bool report = true;
    //! The process before the model was loaded (ranks[i].memory: after the iterations).
    ProcessMemory memory_before;
    //! What the run needs: rank 0's parameters and constants (the ranks of one process share
    //! them), every rank's arena and own allocations, the inputs.
    size_t need_bytes() const;
};

//! Latency summary over iterations, in ms.
struct LatencyStats {
    double min = 0, median = 0, mean = 0, p90 = 0, p99 = 0, max = 0;
    size_t count = 0;
};
LatencyStats latency_stats(std::vector<double> samples);

/*!
 * Under braid-launch (BRAID_SERVER, BRAID_RANK and BRAID_WORLD_SIZE set) fills --server,
 * --rank and --world-size where the flags left them unset, and the backend (gloo) when none
 * was chosen; does nothing under --devices N or --backend mpi. Throws ToolError(EXIT_USAGE)
 * for a malformed variable.
 */
void apply_launch_environment(RunConfig& config);
//! Runs the model as the config says; throws ToolError with the exit status to use.
RunResult run_model(const RunConfig& config);

//! Under --backend mpi, after this rank failed: ends every process of the MPI job (its peers
//! would otherwise wait for this rank until their deadlines). Does nothing when MPI is not
//! running.
void abort_mpi_job(int exit_code);

//! Writes a Chrome trace (Perfetto-readable) of `events`.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);

} // namespace braid::tools
