// Writes the seed inputs of the rendezvous fuzzer (fuzz_rendezvous.cpp): a mode byte, then
// request frames back to back, one file per conversation.
//
//     make_rendezvous_seeds OUTPUT_DIR
#include "comm/frame.h"
#include "comm/group_manager.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace braid::comm;
using Bytes = std::vector<uint8_t>;

constexpr uint8_t NO_TOKEN = 0, WITH_TOKEN = 1;
const char* const TOKEN = "fuzz-token";

FrameMeta meta(uint64_t request_id, bool token = false) {
    return FrameMeta{request_id, token ? TOKEN : "", 1000, 1000, PROTOCOL_VERSION};
}

Bytes reg(uint64_t id, const std::string& key, uint32_t n, bool root, int32_t rank, uint64_t cn,
          bool token = false) {
    return make_register_frame(meta(id, token), key, n, root, rank, cn);
}

Bytes bcast(uint64_t id, const std::string& key, uint32_t size, uint32_t rank, uint32_t root,
            const std::string& data) {
    flatbuffers::FlatBufferBuilder b;
    auto bytes = b.CreateVector(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    auto body = fb::CreateBcastRequest(b, b.CreateString(key), size, rank, root, bytes);
    return make_frame(b, meta(id), fb::Body::BcastRequest, body.Union());
}

Bytes barrier(uint64_t id, const std::string& key, uint32_t size, uint32_t rank) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateBarrierRequest(b, b.CreateString(key), size, rank);
    return make_frame(b, meta(id), fb::Body::BarrierRequest, body.Union());
}

Bytes set_shape(uint64_t id, const std::string& key, std::vector<uint64_t> dims) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateSetShapeRequest(b, b.CreateString(key), b.CreateVector(dims));
    return make_frame(b, meta(id), fb::Body::SetShapeRequest, body.Union());
}

Bytes get_shape(uint64_t id, const std::string& key) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateGetShapeRequest(b, b.CreateString(key));
    return make_frame(b, meta(id), fb::Body::GetShapeRequest, body.Union());
}

Bytes kv_set(uint64_t id, const std::string& key, const std::string& value) {
    flatbuffers::FlatBufferBuilder b;
    auto bytes = b.CreateVector(reinterpret_cast<const uint8_t*>(value.data()), value.size());
    auto body = fb::CreateKvSetRequest(b, b.CreateString(key), bytes);
    return make_frame(b, meta(id), fb::Body::KvSetRequest, body.Union());
}

Bytes kv_get(uint64_t id, const std::string& key) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateKvGetRequest(b, b.CreateString(key));
    return make_frame(b, meta(id), fb::Body::KvGetRequest, body.Union());
}

Bytes kv_add(uint64_t id, const std::string& key, int64_t delta) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateKvAddRequest(b, b.CreateString(key), delta);
    return make_frame(b, meta(id), fb::Body::KvAddRequest, body.Union());
}

Bytes hello(uint64_t id, bool token) {
    flatbuffers::FlatBufferBuilder b;
    auto body = fb::CreateHelloRequest(b);
    return make_frame(b, meta(id, token), fb::Body::HelloRequest, body.Union());
}

void write(const std::filesystem::path& dir, const std::string& name, uint8_t mode,
           const std::vector<Bytes>& frames) {
    std::ofstream out(dir / name, std::ios::binary);
    out.put(char(mode));
    for (auto& f : frames) out.write(reinterpret_cast<const char*>(f.data()), f.size());
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    // Even request ids keep waits; odd ones withdraw the oldest (id & 2: as a disconnect).
    write(dir, "register_pair", NO_TOKEN,
          {reg(2, "g", 2, true, 0, 10), reg(4, "g", 2, false, 1, 11)});
    write(dir, "register_unassigned_with_departure", NO_TOKEN,
          {reg(2, "u", 3, false, UNASSIGNED_RANK, 7), reg(1, "u", 3, false, 0, 8),
           reg(4, "u", 3, false, UNASSIGNED_RANK, 5), reg(6, "u", 3, false, 2, 9),
           reg(8, "u", 3, false, 0, 8)});
    write(dir, "register_conflicts", NO_TOKEN,
          {reg(2, "c", 3, true, 0, 1), reg(4, "c", 3, true, 1, 2), reg(6, "c", 3, false, 2, 3),
           reg(8, "d", 2, false, 0, 1), reg(10, "d", 2, false, 0, 2), reg(12, "e", 2, false, 5, 1),
           reg(14, "huge", 0xffffffffu, false, UNASSIGNED_RANK, 1)});
    write(dir, "bcast_and_barrier", NO_TOKEN,
          {bcast(2, "b", 3, 1, 0, ""), bcast(3, "b", 3, 2, 0, ""), bcast(4, "b", 3, 0, 0, "id"),
           bcast(6, "b", 3, 2, 0, ""), barrier(8, "w", 2, 0), barrier(7, "w", 2, 1),
           barrier(10, "w", 2, 1), barrier(12, "w", 2, 0), barrier(14, "x", 0xffffffffu, 0)});
    write(dir, "shapes_and_values", NO_TOKEN,
          {get_shape(2, "s"), set_shape(4, "s", {2, 3, 4}), get_shape(6, "s"), kv_get(8, "k"),
           kv_set(10, "k", "value"), kv_add(12, "n", 5), kv_add(14, "k", 1), kv_get(16, "n")});
    write(dir, "token", WITH_TOKEN, {hello(2, true), reg(4, "t", 1, false, 0, 1, true)});
    write(dir, "wrong_token", WITH_TOKEN, {hello(2, false)});
    return 0;
}
