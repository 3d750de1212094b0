// libFuzzer target for the ONNX importer: any bytes must import or throw braid::Error, never
// crash, hang, leak past a sanitizer, or throw anything else. Seeds are model files of the
// ONNX backend test data (make_onnx_seeds.sh).
#include "base/log.h"
#include "braid.h"
#include "onnx_import/onnx_import.h"

#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bool initialized = [] {
        braid::register_all_operators();
        braid::logger()->set_level(spdlog::level::off);
        return true;
    }();
    (void)initialized;
    braid::onnx_import::ImportOptions options;
    options.isolate_version_converter = false; // crashes in it must surface here
    options.comp_node = "cpu:default";         // one comp node: each new locator starts a thread
    try {
        auto model =
            braid::onnx_import::import_bytes(std::span<const uint8_t>(data, size), options);
        (void)model;
    } catch (const braid::Error&) {
    }
    return 0;
}
