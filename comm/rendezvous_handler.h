// Request handling of the rendezvous protocol, free of any transport.
//
// admit_frame() decides whether a payload may be handled at all (the flatbuffers verifier,
// the protocol version, the token); handle_request() turns one admitted request into group
// manager calls and reply frames. RendezvousServer feeds them the frames of its TCP
// connections and owns deadlines and sockets; the protocol fuzzer (tests/fuzz) feeds them
// bytes directly. Stateless functions; thread-safe as far as the manager and the context
// passed in are.
#pragma once

#include "comm/frame.h"
#include "comm/group_manager.h"

#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace braid::comm {

//! The longest key a request may name (4 KiB); a longer one gets a ValueError reply.
constexpr size_t MAX_KEY_BYTES = 4096;

//! Why a frame was refused before its request was handled; the connection is then closed.
struct FrameRejection {
    uint64_t request_id = 0; //!< the frame's, when it could be read
    fb::ErrorCode code = fb::ErrorCode::PROTOCOL;
    std::string message;
};

//! The payload as a Frame ready for handle_request(), or why it is refused: the flatbuffers
//! verifier rejected it, it speaks another protocol version, or (when `token` is not empty)
//! it does not carry `token`.
std::variant<const fb::Frame*, FrameRejection> admit_frame(const uint8_t* payload, size_t size,
                                                           std::string_view token);

//! What a request needs from the connection that carried it.
class RequestContext {
public:
    //! Delivers the reply frame of a wait; called once, from any thread, possibly before
    //! wait() returned.
    using Complete = std::function<void(std::vector<uint8_t>)>;
    //! Begins a manager wait given its completion; returns the WaitId.
    using Start = std::function<GroupManager::WaitId(Complete)>;

    virtual ~RequestContext() = default;
    //! Sends a reply frame now.
    virtual void reply(std::vector<uint8_t> frame) = 0;
    /*!
     * Runs a waiting request: calls `start` and owns the wait from then on (its deadline,
     * from `frame`'s timeout, and withdrawing it when that passes or the client leaves).
     * `call` and `key` name it in timeout messages.
     */
    virtual void wait(const fb::Frame& frame, const char* call, std::string key,
                      const Start& start) = 0;
};

/*!
 * Handles one admitted request frame against `manager`: a reply at once through `context`
 * (set_output_shape, set, add, hello, errors), or a wait whose reply follows. A bad argument
 * (a key over MAX_KEY_BYTES, a group above the manager's maximum world size, ...) becomes an
 * error reply; nothing here throws for client input.
 */
void handle_request(GroupManager& manager, const fb::Frame& frame, RequestContext& context);

} // namespace braid::comm
