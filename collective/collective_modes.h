// The mode traits of CollectiveComm: one class per mode defines the output shape, the
// execution on a Communicator, and the gradient. Adding a mode touches this file pair and
// the CollectiveMode enum.
#pragma once

#include "collective/collective_comm.h"

namespace braid::opr {

//! Bytes one rank sends to and receives from its peers in one collective.
struct CollectiveTraffic {
    size_t sent = 0;
    size_t received = 0;
    bool operator==(const CollectiveTraffic&) const = default;
};

//! What a collective mode is. Stateless; one instance per mode.
class CollectiveModeTrait {
public:
    virtual ~CollectiveModeTrait() = default;
    //! Whether a rank (root or not) contributes an input.
    virtual bool rank_has_input(bool is_root) const { return true; }
    //! Whether the root matters (BROADCAST, REDUCE_SUM, GATHER, SCATTER).
    virtual bool rooted() const { return false; }
    //! Whether the output may take over the input's memory.
    virtual bool inplace() const { return false; }
    //! This rank's output shape from its input shape (nullptr when it has no input); may
    //! publish or read the shape through the group manager, waiting for the root only when
    //! `may_block`. Returns false when not known yet; throws ShapeError.
    virtual bool output_shape(const CollectiveComm& opr, const TensorShape* in, TensorShape& out,
                              bool may_block) const = 0;
    /*!
     * The bytes this rank sends and receives, from its input bytes (0 when it has no input)
     * and output bytes, in a group of `n` ranks, under the bandwidth-optimal algorithm of the
     * mode: a ring for the symmetric modes (all-reduce as reduce-scatter then all-gather), the
     * root exchanging with each peer for the rooted ones. Fractions of a byte round down.
     */
    virtual CollectiveTraffic traffic(size_t in_bytes, size_t out_bytes, uint32_t n,
                                      bool is_root) const = 0;
    //! Runs the collective. `in` is nullptr when the rank has no input.
    virtual void execute(comm::Communicator& c, const Tensor* in, Tensor& out, uint32_t rank,
                         uint32_t root) const = 0;
    //! The gradient of this rank's input (or, with wrt = GRAD_SIDE_EFFECT_ONLY, the
    //! gradient collective this rank must take part in), from the output gradient `g`.
    virtual VarNode* grad(CollectiveComm& opr, size_t wrt, SymbolVar g) const = 0;
};

//! Zeroes a {1} placeholder output (a non-root's, a send's) in host memory or, for a stream
//! backend, on the communicator's comp node (a copy queued on its stream, ordered before the
//! transfer).
void zero_fill(const comm::Communicator& c, Tensor& t);

//! The trait of `mode`.
const CollectiveModeTrait& mode_trait(CollectiveMode mode);

//! Registers CollectiveComm's CUDA kernel (execute(); see collective_comm.cpp).
void register_collective_kernels();

} // namespace braid::opr
