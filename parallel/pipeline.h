// Pipeline-parallel training: a sequential model split into S stages, each stage one graph on
// its own comp node (ranks as threads) or its own process (mpirun), B micro-batches per step
// under the GPipe or the 1F1B schedule, gradients accumulated in place over the micro-batches
// and one optimizer update per step on their mean.
//
// One training step of a stage is one executable. Its graph holds the stage's layers once per
// micro-batch, in the order of the schedule: a stage's comp node runs its operators one at a
// time in insertion order (graph/schedule.h), so the order the graph is built in *is* the
// schedule, and the static memory plan sees exactly which micro-batches' activations are alive
// at each step (GPipe: all B after the forwards; 1F1B: at most S - i on stage i).
//
// Activations cross stages through RemoteSend/RemoteRecv (collective/remote_send_recv.h) under
// the key "<key>/a<i>/<j>" (stage i to i + 1, micro-batch j); gradients come back under that
// key + ":grad", sent by the receiver's grad() and received by the sender's grad() of the send
// placeholder. Sends are synchronous (a send returns once its recv took the message), and a
// stage does one thing at a time, so the sends and recvs of two neighbours must come in the
// same order on both sides. pipeline_program() places every activation recv where that holds
// (on 1F1B a stage posts the recv of its next micro-batch before it sends the gradient of the
// previous one, as Megatron's send_backward_recv_forward does), and check_pipeline_program()
// proves it by running the programs against each other with rendezvous semantics.
//
// Gradient accumulators: micro-batch j's gradient of a parameter is added to the accumulator
// (acc = acc + g_j); the accumulator dies at that add, so the memory plan gives the sum the
// accumulator's own bytes (in place: the accumulator is donated, as Alpa's
// module_donate_invars marks it). The update reads acc * (1 / B), also in place.
//
// Thread safety: building a stage is single-threaded per stage; a PipelineStage is driven from
// one thread; PipelineTrainer drives its S stages from S threads it starts per step.
#pragma once

#include "comm/group_client.h"
#include "graph/computing_graph.h"
#include "graph/executable.h"
#include "graph/symbol_var.h"
#include "operators/optimizer.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace braid::parallel {

//! One layer of a sequential model: y = forward(x, params). Its parameter tensors are shared
//! with every graph built from the model and updated in place by training.
struct PipelineLayer {
    std::string name;
    std::vector<std::shared_ptr<Tensor>> params;
    std::function<SymbolVar(SymbolVar x, const SymbolVarArray& params)> forward;
};

/*!
 * A sequential model: x {rows, input_width} through every layer, then the loss of the last
 * layer's output against labels {rows, label_width}. The loss must be the mean over the rows
 * of a per-row loss (so that the mean of the micro-batches' gradients is the whole batch's).
 */
struct PipelineModel {
    std::vector<PipelineLayer> layers;
    size_t input_width = 0, label_width = 0;
    std::function<SymbolVar(SymbolVar output, SymbolVar labels)> loss;
};

//! The loss of `model` on one device: inputs "x" {rows, input_width} and "labels"; the
//! parameters are the model's tensors (SharedParam vars, in layer order).
struct SequentialLoss {
    SymbolVarArray params;
    SymbolVar loss;
};
SequentialLoss build_sequential_loss(ComputingGraph& graph, const PipelineModel& model,
                                     size_t rows);

//! The order of a step's forward and backward passes.
enum class PipelineSchedule : uint8_t {
    GPIPE,      //!< all B forwards, then all B backwards
    ONE_F_ONE_B //!< S - i - 1 forwards on stage i, then one forward and one backward in turn
};
//! "gpipe" or "1f1b".
const char* pipeline_schedule_name(PipelineSchedule schedule);
//! The schedule named "gpipe" or "1f1b"; ValueError otherwise.
PipelineSchedule parse_pipeline_schedule(const std::string& name);

//! One step of a stage's program.
struct PipelineOp {
    enum Kind : uint8_t {
        RECV_ACTIVATION, //!< micro-batch's input from stage i - 1
        FORWARD,         //!< the stage's layers on it (the last stage: and the loss)
        SEND_ACTIVATION, //!< its output to stage i + 1
        RECV_GRAD,       //!< d loss / d output from stage i + 1
        BACKWARD,        //!< the stage's gradients, added to the accumulators
        SEND_GRAD,       //!< d loss / d input to stage i - 1
    };
    Kind kind;
    uint32_t microbatch;
    bool operator==(const PipelineOp&) const = default;
};
//! "F3", "B0", "recv a2", ...
std::string to_string(const PipelineOp& op);

//! Stage i's forwards and backwards (FORWARD/BACKWARD ops only) in schedule order.
std::vector<PipelineOp> pipeline_tasks(PipelineSchedule schedule, uint32_t nr_stages,
                                       uint32_t microbatches, uint32_t stage);
//! Every stage's whole program: the tasks with their sends and recvs in a deadlock-free order.
std::vector<std::vector<PipelineOp>> pipeline_program(PipelineSchedule schedule, uint32_t nr_stages,
                                                      uint32_t microbatches);
/*!
 * Runs the programs against each other with synchronous sends (a send and its recv complete
 * together) and throws GraphError naming each stuck stage and the op it waits at when they
 * would deadlock, or when a message has no matching recv.
 */
void check_pipeline_program(const std::vector<std::vector<PipelineOp>>& programs);

//! How to train a model on a pipeline.
struct PipelineOptions {
    //! First layer of every stage (stage_begin[0] == 0, increasing); S = its size.
    std::vector<size_t> stage_begin;
    uint32_t microbatches = 1;
    PipelineSchedule schedule = PipelineSchedule::ONE_F_ONE_B;
    opr::OptimizerConfig optimizer;
    size_t batch = 0; //!< rows of a step's batch; divisible by microbatches
    std::string backend = "local";
    std::shared_ptr<comm::GroupClient> client; //!< where the stages' transfers meet
    std::string key = "pipeline";              //!< prefix of every transfer key
    //! Comp node of stage i; unset: "cpu<i>".
    std::function<std::string(uint32_t stage)> comp_node;
    //! Rank of stage i in the backend's world; unset: i.
    std::function<int32_t(uint32_t stage)> rank;

    uint32_t nr_stages() const { return uint32_t(stage_begin.size()); }
};

//! S stages of about equal numbers of layers: stage i starts at layer i * L / S.
std::vector<size_t> equal_layer_split(size_t nr_layers, uint32_t nr_stages);

/*!
 * One stage of a pipeline: its graph and the executable of one training step. Feed it with
 * feed() (stage 0 reads x, the last stage the labels), run step->run() at the same time as
 * every other stage, then read loss() on the last stage. Not thread-safe; the model's
 * parameter tensors of this stage's layers must outlive it.
 */
struct PipelineStage {
    uint32_t index = 0, nr_stages = 0, microbatches = 0;
    size_t first_layer = 0, end_layer = 0;
    std::shared_ptr<ComputingGraph> graph;
    std::unique_ptr<Executable> step;
    std::vector<PipelineOp> program;
    //! Graph operators [begin, end) that program[k] inserted (SEND/RECV ops that grad()
    //! inserts belong to their FORWARD/BACKWARD).
    std::vector<std::pair<size_t, size_t>> op_range;
    std::vector<SymbolVar> inputs, labels; //!< per micro-batch ("x/<j>", "labels/<j>")
    SymbolVar mean_loss;                   //!< last stage: the mean of the micro-batches' losses
    size_t nr_accumulators = 0;            //!< gradient accumulator adds in the graph
    //! What `step` computes: the activation sends' placeholders, then one ParamUpdate per
    //! parameter of the stage's layers (in layer order), then the last stage's mean loss.
    SymbolVarArray step_outputs;
    size_t first_update = 0; //!< index of the first ParamUpdate in step_outputs

    //! Feeds micro-batch j's rows of x {batch, input_width} and labels (views, no copy; keep
    //! them alive until the step finished).
    void feed(const Tensor& x, const Tensor& labels);
    //! The last stage's mean loss of the last step; 0 on other stages.
    double loss() const;
    //! The program entry that inserted operator `opr`, or -1.
    long program_entry_of(const OperatorNode& opr) const;
};

//! Builds stage `stage` of the pipeline (its graph on options.comp_node(stage)). A stage's
//! activation recvs learn their shapes from the previous stage, so build stage i - 1 first
//! when both live in one process (or build them on threads).
PipelineStage build_pipeline_stage(const PipelineModel& model, const PipelineOptions& options,
                                   uint32_t stage);

/*!
 * All stages of a pipeline in this process, stage i on comp node "cpu<i>" (backend local, an
 * in-process group manager unless options.client is set); step() runs one training step with
 * one thread per stage. When a stage fails, step() waits for the others (each ends at its
 * deadline at the latest) and throws Error naming every failed stage and its error.
 */
class PipelineTrainer {
public:
    PipelineTrainer(const PipelineModel& model, PipelineOptions options);
    //! One step on the batch x {batch, input_width}, labels {batch, label_width}; returns the
    //! mean loss.
    double step(const Tensor& x, const Tensor& labels);
    //! Runs only `stages` of the next step (the others stay idle, like a dead peer): tests.
    double step_only(const Tensor& x, const Tensor& labels, const std::vector<uint32_t>& stages);
    PipelineStage& stage(uint32_t i) { return m_stages.at(i); }
    uint32_t nr_stages() const { return uint32_t(m_stages.size()); }
    const PipelineOptions& options() const { return m_options; }

private:
    PipelineOptions m_options;
    std::vector<PipelineStage> m_stages;
};

//! Micro-batch j's rows of t {batch, ...} cut into `microbatches` (a view, no copy). Throws
//! ShapeError naming `what` when t is not 2-d or its rows do not split.
Tensor microbatch_rows(const Tensor& t, uint32_t microbatches, uint32_t j, const std::string& what);

//! Runs every job on a thread of its own and waits for all of them; when jobs failed, throws
//! Error with one line per failed job: "<its name>: <its error>".
void run_concurrently(const std::vector<std::pair<std::string, std::function<void()>>>& jobs);

/*!
 * The largest number of micro-batches whose forward activations one stage's memory plan
 * keeps at one step: activations are the arena vars its FORWARD ops wrote (not the received
 * inputs), alive from that write to their last read in the BACKWARD. 1F1B keeps at most
 * S - i on stage i, GPipe B.
 */
size_t max_microbatches_in_flight(const PipelineStage& stage);

} // namespace braid::parallel
