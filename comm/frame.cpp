#include "comm/frame.h"

#include <fmt/format.h>

#include <cstring>

namespace braid::comm {

uint32_t parse_frame_header(const uint8_t* header, std::string& error, uint32_t max_bytes) {
    if (std::memcmp(header, FRAME_MAGIC.data(), FRAME_MAGIC.size()) != 0) {
        error = fmt::format("bad frame magic {:02x}{:02x}{:02x}{:02x}, expected \"BRDZ\" (not a "
                            "braid rendezvous client?)",
                            header[0], header[1], header[2], header[3]);
        return 0;
    }
    uint32_t length = uint32_t(header[4]) | uint32_t(header[5]) << 8 | uint32_t(header[6]) << 16 |
                      uint32_t(header[7]) << 24;
    if (length > max_bytes) {
        error = fmt::format("frame of {} bytes exceeds the limit of {} bytes", length, max_bytes);
        return 0;
    }
    if (length == 0) {
        error = "empty frame";
        return 0;
    }
    return length;
}

namespace {

//! Whether the 8-byte elements of `vec` (may be null) are 8-byte aligned: the flatbuffers
//! verifier checks only the 4-byte length prefix, and reading a misaligned one is undefined.
template <typename T> bool aligned(const flatbuffers::Vector<T>* vec) {
    return !vec || !vec->size() || reinterpret_cast<uintptr_t>(vec->data()) % alignof(T) == 0;
}

} // namespace

const fb::Frame* verify_frame(const uint8_t* payload, size_t size) {
    // Small depth and table limits: legitimate frames are two tables deep.
    flatbuffers::Verifier verifier(payload, size, /*max_depth=*/16, /*max_tables=*/64);
    if (!fb::VerifyFrameBuffer(verifier)) return nullptr;
    const fb::Frame* frame = fb::GetFrame(payload);
    // The only lists of 8-byte values: shape dims.
    if (auto* req = frame->body_as_SetShapeRequest(); req && !aligned(req->dims())) return nullptr;
    if (auto* rep = frame->body_as_ShapeReply(); rep && !aligned(rep->dims())) return nullptr;
    return frame;
}

std::vector<uint8_t> finish_frame(flatbuffers::FlatBufferBuilder& builder,
                                  flatbuffers::Offset<fb::Frame> frame) {
    fb::FinishFrameBuffer(builder, frame);
    uint32_t size = builder.GetSize();
    std::vector<uint8_t> out(FRAME_HEADER_SIZE + size);
    std::memcpy(out.data(), FRAME_MAGIC.data(), FRAME_MAGIC.size());
    for (int i = 0; i < 4; ++i) out[4 + i] = uint8_t(size >> (8 * i));
    std::memcpy(out.data() + FRAME_HEADER_SIZE, builder.GetBufferPointer(), size);
    return out;
}

std::vector<uint8_t> make_frame(flatbuffers::FlatBufferBuilder& builder, const FrameMeta& meta,
                                fb::Body body_type, flatbuffers::Offset<void> body) {
    auto token =
        meta.token.empty() ? 0 : builder.CreateString(meta.token.data(), meta.token.size());
    fb::FrameBuilder frame(builder);
    frame.add_version(meta.version);
    frame.add_request_id(meta.request_id);
    if (!meta.token.empty()) frame.add_token(token);
    frame.add_timeout_ms(meta.timeout_ms);
    if (meta.timeout_span_ms) frame.add_timeout_span_ms(meta.timeout_span_ms);
    frame.add_body_type(body_type);
    frame.add_body(body);
    return finish_frame(builder, frame.Finish());
}

std::vector<uint8_t> make_error_frame(uint64_t request_id, fb::ErrorCode code,
                                      std::string_view message) {
    flatbuffers::FlatBufferBuilder builder(128 + message.size());
    auto body =
        fb::CreateErrorReply(builder, code, builder.CreateString(message.data(), message.size()));
    return make_frame(builder, FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION},
                      fb::Body::ErrorReply, body.Union());
}

std::vector<uint8_t> make_register_frame(const FrameMeta& meta, std::string_view key,
                                         uint32_t nr_devices, bool is_root, int32_t rank,
                                         uint64_t comp_node_id) {
    flatbuffers::FlatBufferBuilder builder(128 + key.size());
    auto body = fb::CreateRegisterRequest(builder, builder.CreateString(key.data(), key.size()),
                                          nr_devices, is_root, rank, comp_node_id);
    return make_frame(builder, meta, fb::Body::RegisterRequest, body.Union());
}

} // namespace braid::comm
