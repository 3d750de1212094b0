// make_example_models: writes the example models (examples/models/*.braid) into a directory;
// run by the build. Models that need operators this build lacks are listed as skipped.
//
//     make_example_models OUT_DIR [--fuzz-seeds DIR]
#include "tools/example_models.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace braid;

int main(int argc, char** argv) {
    CLI::App app{"Writes braid's example models.", "make_example_models"};
    std::string out_dir, seeds_dir;
    app.add_option("out_dir", out_dir, "Directory for NAME.braid files")->required();
    app.add_option("--fuzz-seeds", seeds_dir, "Also write small seed models for the fuzzer here");
    CLI11_PARSE(app, argc, argv);
    try {
        register_all_operators();
        std::filesystem::create_directories(out_dir);
        for (auto& m : examples::example_models()) {
            if (!m.build) {
                std::printf("skipped %s.braid: %s\n", m.name.c_str(), m.pending.c_str());
                continue;
            }
            auto graph = ComputingGraph::make();
            auto outputs = m.build(*graph);
            DumpOptions opt = m.dump_options;
            opt.producer = "braid make_example_models";
            opt.metadata.emplace_back("description", m.description);
            auto path = (std::filesystem::path(out_dir) / (m.name + ".braid")).string();
            dump(outputs, path, opt);
            std::printf("wrote %s\n", path.c_str());
        }
        if (!seeds_dir.empty()) {
            std::filesystem::create_directories(seeds_dir);
            for (auto& [name, bytes] : examples::fuzz_seed_models()) {
                std::ofstream f(std::filesystem::path(seeds_dir) / (name + ".braid"),
                                std::ios::binary | std::ios::trunc);
                f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
            }
            std::printf("wrote fuzz seeds to %s\n", seeds_dir.c_str());
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "make_example_models: error: %s\n", e.what());
        return 1;
    }
}
