// libFuzzer target for the rendezvous protocol: frame parsing and request handling, as the
// server runs them on what arrives from a connection, without sockets.
//
// Input: one mode byte, then frames back to back (8-byte header + payload), as a client
// would send them. Mode bit 0 gives the server a token. Each frame goes through
// parse_frame_header(), admit_frame() and handle_request() against one GroupManager (a
// small maximum world size keeps rounds completable); a request id with bit 0 set then
// withdraws the oldest pending wait (bit 1: as a disconnect, else as a timeout), so rounds
// see peers arrive, leave and come back. What must hold: nothing crashes or trips a
// sanitizer, no exception escapes, every reply is a frame the client's verifier accepts,
// and error messages stay bounded whatever sizes the requests claim.
#include "base/log.h"
#include "comm/frame.h"
#include "comm/group_manager.h"
#include "comm/rendezvous_handler.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

namespace {

using namespace braid::comm;

//! The longest error message a reply may carry: a few keys plus fixed text.
constexpr size_t MAX_MESSAGE_BYTES = 4 * MAX_KEY_BYTES + 4096;

void check_reply(const std::vector<uint8_t>& reply) {
    std::string error;
    uint32_t length =
        reply.size() >= FRAME_HEADER_SIZE ? parse_frame_header(reply.data(), error, UINT32_MAX) : 0;
    if (length == 0 || length != reply.size() - FRAME_HEADER_SIZE) {
        std::fprintf(stderr, "reply with a bad header (%zu bytes): %s\n", reply.size(),
                     error.c_str());
        std::abort();
    }
    const fb::Frame* frame = verify_frame(reply.data() + FRAME_HEADER_SIZE, length);
    if (!frame) {
        std::fprintf(stderr, "reply of %u bytes fails verification\n", length);
        std::abort();
    }
    if (auto* err = frame->body_as_ErrorReply()) {
        size_t size = err->message() ? err->message()->size() : 0;
        if (size > MAX_MESSAGE_BYTES) {
            std::fprintf(stderr, "error message of %zu bytes: %.200s...\n", size,
                         err->message()->c_str());
            std::abort();
        }
    }
}

//! A connection without a socket: replies are checked and dropped, waits are kept until
//! the input withdraws them or ends.
class FuzzContext final : public RequestContext {
public:
    void reply(std::vector<uint8_t> frame) override { check_reply(frame); }
    void wait(const fb::Frame&, const char*, std::string, const Start& start) override {
        GroupManager::WaitId id = start([](std::vector<uint8_t> frame) { check_reply(frame); });
        if (id) m_waits.push_back(id);
    }
    //! Withdraws the oldest wait still known; its description must be bounded too.
    void withdraw_oldest(GroupManager& manager, WithdrawReason reason) {
        if (m_waits.empty()) return;
        auto description = manager.withdraw(m_waits.front(), reason);
        m_waits.pop_front();
        if (description && description->size() > MAX_MESSAGE_BYTES) {
            std::fprintf(stderr, "wait description of %zu bytes\n", description->size());
            std::abort();
        }
    }
    void withdraw_all(GroupManager& manager) {
        while (!m_waits.empty()) withdraw_oldest(manager, WithdrawReason::DISCONNECTED);
    }

private:
    std::deque<GroupManager::WaitId> m_waits;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool initialized = [] {
        braid::logger()->set_level(spdlog::level::off);
        return true;
    }();
    (void)initialized;
    if (size == 0) return 0;
    std::string token = (data[0] & 1) ? "fuzz-token" : "";
    ++data;
    --size;
    GroupManager manager(/*max_world_size=*/64);
    FuzzContext context;
    while (size >= FRAME_HEADER_SIZE) {
        std::string error;
        uint32_t length = parse_frame_header(data, error);
        if (length == 0 || length > size - FRAME_HEADER_SIZE) break; // the server would close
        const uint8_t* payload = data + FRAME_HEADER_SIZE;
        data += FRAME_HEADER_SIZE + length;
        size -= FRAME_HEADER_SIZE + length;
        // The server hands admit_frame() its own aligned buffer, not a slice of the stream.
        std::vector<uint8_t> buffer(payload, payload + length);
        auto admitted = admit_frame(buffer.data(), buffer.size(), token);
        if (std::holds_alternative<FrameRejection>(admitted)) break; // rejected: closed
        const fb::Frame& frame = *std::get<const fb::Frame*>(admitted);
        handle_request(manager, frame, context);
        if (frame.request_id() & 1)
            context.withdraw_oldest(manager, (frame.request_id() & 2) ? WithdrawReason::DISCONNECTED
                                                                      : WithdrawReason::TIMED_OUT);
    }
    context.withdraw_all(manager);
    if (manager.nr_pending() != 0) {
        std::fprintf(stderr, "%zu waits left after every one was withdrawn\n",
                     manager.nr_pending());
        std::abort();
    }
    return 0;
}
