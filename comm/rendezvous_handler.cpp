#include "comm/rendezvous_handler.h"

#include "base/error.h"

#include <fmt/format.h>

namespace braid::comm {

namespace {

//! Compares secrets without leaking the position of the first difference through timing.
bool equal_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    uint8_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
    return diff == 0;
}

std::string_view as_view(const flatbuffers::String* s) {
    return s ? std::string_view(s->data(), s->size()) : std::string_view();
}

std::string_view as_view(const flatbuffers::Vector<uint8_t>* v) {
    return v ? std::string_view(reinterpret_cast<const char*>(v->data()), v->size())
             : std::string_view();
}

fb::ErrorCode error_code(ErrorKind kind) {
    switch (kind) {
    case ErrorKind::TIMEOUT:
        return fb::ErrorCode::TIMEOUT;
    case ErrorKind::VALUE:
        return fb::ErrorCode::VALUE;
    case ErrorKind::COMM:
        break;
    }
    return fb::ErrorCode::COMM;
}

FrameMeta reply_meta(uint64_t request_id) {
    return FrameMeta{request_id, {}, 0, 0, PROTOCOL_VERSION};
}

std::vector<uint8_t> ok_frame(uint64_t request_id) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateOkReply(builder);
    return make_frame(builder, reply_meta(request_id), fb::Body::OkReply, body.Union());
}

std::vector<uint8_t> bytes_frame(uint64_t request_id, const std::string& bytes) {
    flatbuffers::FlatBufferBuilder builder(64 + bytes.size());
    auto data = builder.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    auto body = fb::CreateBytesReply(builder, data);
    return make_frame(builder, reply_meta(request_id), fb::Body::BytesReply, body.Union());
}

std::vector<uint8_t> int_frame(uint64_t request_id, int64_t value) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateIntReply(builder, value);
    return make_frame(builder, reply_meta(request_id), fb::Body::IntReply, body.Union());
}

std::vector<uint8_t> shape_frame(uint64_t request_id, const TensorShape& shape) {
    flatbuffers::FlatBufferBuilder builder(128);
    std::vector<uint64_t> dims(shape.ndim());
    for (size_t i = 0; i < shape.ndim(); ++i) dims[i] = shape[i];
    auto body = fb::CreateShapeReply(builder, builder.CreateVector(dims));
    return make_frame(builder, reply_meta(request_id), fb::Body::ShapeReply, body.Union());
}

std::vector<uint8_t> register_frame(uint64_t request_id, const RegisterInfo& info) {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateRegisterReply(builder, info.hash, info.rank, info.root_rank);
    return make_frame(builder, reply_meta(request_id), fb::Body::RegisterReply, body.Union());
}

//! Starts a manager wait through `context`; `encode` turns its result into the reply frame.
template <typename T, typename Begin, typename Encode>
void start_wait(RequestContext& context, const fb::Frame& frame, const char* call,
                std::string_view key, Begin&& begin, Encode encode) {
    uint64_t request_id = frame.request_id();
    context.wait(frame, call, std::string(key), [&](RequestContext::Complete complete) {
        return begin([complete = std::move(complete), request_id, encode](Outcome<T> outcome) {
            if (auto* error = std::get_if<CallError>(&outcome))
                complete(make_error_frame(request_id, error_code(error->kind), error->message));
            else
                complete(encode(request_id, std::get<T>(outcome)));
        });
    });
}

//! The key of a request, or nothing after replying with a ValueError when it is too long.
std::optional<std::string> checked_key(const flatbuffers::String* key, const char* call,
                                       uint64_t request_id, RequestContext& context) {
    std::string_view view = as_view(key);
    if (view.size() <= MAX_KEY_BYTES) return std::string(view);
    context.reply(
        make_error_frame(request_id, fb::ErrorCode::VALUE,
                         fmt::format("{}: a key of {} bytes exceeds the limit of {} bytes", call,
                                     view.size(), MAX_KEY_BYTES)));
    return std::nullopt;
}

} // namespace

std::variant<const fb::Frame*, FrameRejection> admit_frame(const uint8_t* payload, size_t size,
                                                           std::string_view token) {
    const fb::Frame* frame = verify_frame(payload, size);
    if (!frame)
        return FrameRejection{0, fb::ErrorCode::PROTOCOL,
                              fmt::format("malformed frame of {} bytes: the flatbuffers verifier "
                                          "rejected it",
                                          size)};
    uint64_t request_id = frame->request_id();
    if (frame->version() != PROTOCOL_VERSION)
        return FrameRejection{request_id, fb::ErrorCode::PROTOCOL,
                              fmt::format("protocol version {} is not supported: this server "
                                          "speaks version {}; use a matching braid build",
                                          frame->version(), PROTOCOL_VERSION)};
    if (!token.empty() && !equal_secret(as_view(frame->token()), token))
        return FrameRejection{request_id, fb::ErrorCode::AUTH,
                              "authentication failed: the request's token does not match the "
                              "server's (set BRAID_TOKEN to the server's --token)"};
    return frame;
}

void handle_request(GroupManager& manager, const fb::Frame& frame, RequestContext& context) {
    uint64_t id = frame.request_id();
    // The verifier accepts a union whose type is set but whose table is absent.
    if (frame.body_type() != fb::Body::NONE && !frame.body()) {
        context.reply(make_error_frame(id, fb::ErrorCode::PROTOCOL,
                                       fmt::format("frame names body {} but carries none",
                                                   fb::EnumNameBody(frame.body_type()))));
        return;
    }
    try {
        switch (frame.body_type()) {
        case fb::Body::HelloRequest:
            context.reply(ok_frame(id));
            break;
        case fb::Body::RegisterRequest: {
            auto* req = frame.body_as_RegisterRequest();
            auto key = checked_key(req->key(), "opr_register", id, context);
            if (!key) break;
            start_wait<RegisterInfo>(
                context, frame, "opr_register", *key,
                [&](auto done) {
                    return manager.opr_register(*key, req->nr_devices(), req->is_root(),
                                                req->rank(), req->comp_node_id(), std::move(done));
                },
                register_frame);
            break;
        }
        case fb::Body::SetShapeRequest: {
            auto* req = frame.body_as_SetShapeRequest();
            auto key = checked_key(req->key(), "set_output_shape", id, context);
            if (!key) break;
            TensorShape shape;
            size_t ndim = req->dims() ? req->dims()->size() : 0;
            shape.set_ndim(ndim); // throws ShapeError above the largest rank
            for (size_t i = 0; i < ndim; ++i) shape[i] = req->dims()->Get(i);
            manager.set_output_shape(*key, shape);
            context.reply(ok_frame(id));
            break;
        }
        case fb::Body::GetShapeRequest: {
            auto key = checked_key(frame.body_as_GetShapeRequest()->key(), "get_output_shape", id,
                                   context);
            if (!key) break;
            start_wait<TensorShape>(
                context, frame, "get_output_shape", *key,
                [&](auto done) { return manager.get_output_shape(*key, std::move(done)); },
                shape_frame);
            break;
        }
        case fb::Body::BcastRequest: {
            auto* req = frame.body_as_BcastRequest();
            auto key = checked_key(req->key(), "bcast_bytes", id, context);
            if (!key) break;
            start_wait<std::string>(
                context, frame, "bcast_bytes", *key,
                [&](auto done) {
                    return manager.bcast_bytes(*key, req->size(), req->rank(), req->root(),
                                               std::string(as_view(req->data())), std::move(done));
                },
                bytes_frame);
            break;
        }
        case fb::Body::BarrierRequest: {
            auto* req = frame.body_as_BarrierRequest();
            auto key = checked_key(req->key(), "group_barrier", id, context);
            if (!key) break;
            start_wait<std::monostate>(
                context, frame, "group_barrier", *key,
                [&](auto done) {
                    return manager.group_barrier(*key, req->size(), req->rank(), std::move(done));
                },
                [](uint64_t rid, std::monostate) { return ok_frame(rid); });
            break;
        }
        case fb::Body::KvSetRequest: {
            auto* req = frame.body_as_KvSetRequest();
            auto key = checked_key(req->key(), "set", id, context);
            if (!key) break;
            manager.kv_set(*key, std::string(as_view(req->value())));
            context.reply(ok_frame(id));
            break;
        }
        case fb::Body::KvGetRequest: {
            auto key = checked_key(frame.body_as_KvGetRequest()->key(), "get", id, context);
            if (!key) break;
            start_wait<std::string>(
                context, frame, "get", *key,
                [&](auto done) { return manager.kv_get(*key, std::move(done)); }, bytes_frame);
            break;
        }
        case fb::Body::KvAddRequest: {
            auto* req = frame.body_as_KvAddRequest();
            auto key = checked_key(req->key(), "add", id, context);
            if (!key) break;
            context.reply(int_frame(id, manager.kv_add(*key, req->delta())));
            break;
        }
        default:
            context.reply(make_error_frame(id, fb::ErrorCode::PROTOCOL,
                                           fmt::format("frame body {} is not a request",
                                                       fb::EnumNameBody(frame.body_type()))));
            break;
        }
    } catch (const ValueError& e) {
        context.reply(make_error_frame(id, fb::ErrorCode::VALUE, e.what()));
    } catch (const ShapeError& e) {
        context.reply(make_error_frame(id, fb::ErrorCode::VALUE, e.what()));
    }
}

} // namespace braid::comm
