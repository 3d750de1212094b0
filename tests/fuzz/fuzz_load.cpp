// libFuzzer target for the model loader: any bytes must load or throw braid::Error, never
// crash, leak past a sanitizer, or throw anything else.
//
// Each input is loaded twice: with the integrity checks (the path every real load takes; it
// stops at the checksum for almost every mutation) and without them, so mutated structure
// reaches the flatbuffers verifier, the index/shape/dtype checks and the operator loaders.
#include "base/log.h"
#include "braid.h"

#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool initialized = [] {
        braid::register_all_operators();
        braid::logger()->set_level(spdlog::level::off);
        return true;
    }();
    (void)initialized;
    std::span<const uint8_t> bytes(data, size);
    for (bool integrity : {true, false}) {
        braid::LoadOptions options;
        options.verify_integrity = integrity;
        // One comp node: a model may name any locator, and each new one starts a thread.
        options.comp_node = "cpu:default";
        try {
            auto model = braid::load(bytes, options);
            (void)model;
        } catch (const braid::Error&) {
        }
        try {
            auto desc = braid::describe_model(bytes);
            (void)desc;
        } catch (const braid::Error&) {
        }
    }
    return 0;
}
