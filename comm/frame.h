// Framing of the rendezvous protocol: 8-byte header + a verified flatbuffer.
//
// A frame is the magic "BRDZ", a little-endian uint32 payload length, then a Frame
// flatbuffer (schema comm/rendezvous.fbs, compiled by flatc at build time). Readers check
// the magic and the length limit on the header before reading the payload, and run the
// flatbuffers Verifier over every payload before touching it, so garbage, truncated and
// oversized frames are rejected without being parsed. Stateless functions; thread-safe.
#pragma once

#include "comm/rendezvous_generated.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::comm {

//! The protocol version every frame carries; peers of another version are refused.
constexpr uint32_t PROTOCOL_VERSION = 1;
//! Bytes of the frame header (magic + length).
constexpr size_t FRAME_HEADER_SIZE = 8;
//! The largest payload either side accepts (16 MiB); a bigger frame closes the connection.
constexpr uint32_t MAX_FRAME_BYTES = 16u << 20;
//! The largest first frame a server accepts by default on a new connection (64 KiB): until a
//! frame proved the token (or, without one, was a valid request), a connection may not make
//! the server buffer more.
constexpr uint32_t FIRST_FRAME_BYTES = 64u << 10;
//! The smallest first-frame limit a server may be configured with (4 KiB). A client whose
//! first request on a connection is larger sends a HelloRequest first.
constexpr uint32_t MIN_FIRST_FRAME_BYTES = 4u << 10;
//! The magic that opens every frame.
constexpr std::array<uint8_t, 4> FRAME_MAGIC = {'B', 'R', 'D', 'Z'};

//! Reads a frame header and returns the payload length; sets `error` (and returns 0) for a
//! wrong magic or a length above `max_bytes`.
uint32_t parse_frame_header(const uint8_t* header, std::string& error,
                            uint32_t max_bytes = MAX_FRAME_BYTES);

//! The payload as a Frame when the Verifier accepts it (and its identifier is "BRDZ"),
//! else nullptr.
const fb::Frame* verify_frame(const uint8_t* payload, size_t size);

//! Header + payload of a finished builder, ready to write.
std::vector<uint8_t> finish_frame(flatbuffers::FlatBufferBuilder& builder,
                                  flatbuffers::Offset<fb::Frame> frame);

//! The envelope fields of a frame.
struct FrameMeta {
    uint64_t request_id = 0;
    std::string_view token;
    uint64_t timeout_ms = 0;      //!< how long the server may hold the request (0: default)
    uint64_t timeout_span_ms = 0; //!< the caller's whole timeout, for messages (0: unknown)
    uint32_t version = PROTOCOL_VERSION;
};

//! Builds a whole frame around a body the caller created in `builder`.
std::vector<uint8_t> make_frame(flatbuffers::FlatBufferBuilder& builder, const FrameMeta& meta,
                                fb::Body body_type, flatbuffers::Offset<void> body);

//! A frame carrying an ErrorReply.
std::vector<uint8_t> make_error_frame(uint64_t request_id, fb::ErrorCode code,
                                      std::string_view message);

//! A RegisterRequest frame (shared by TcpGroupClient and the benchmarks).
std::vector<uint8_t> make_register_frame(const FrameMeta& meta, std::string_view key,
                                         uint32_t nr_devices, bool is_root, int32_t rank,
                                         uint64_t comp_node_id);

} // namespace braid::comm
