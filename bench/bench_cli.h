// Command-line parsing of the bench programs, through CLI11: --help prints the options and
// exits 0; an unknown flag or a bad value prints CLI11's message and exits 2, the usage status
// these programs have always returned (CLI11's own exit codes are 100 and above).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace braid::bench {

//! Parses argv into app's options. Returns the status the program must exit with (0 after
//! --help, 2 after a usage error, CLI11's message printed), or nullopt when it goes on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    return std::nullopt;
}

} // namespace braid::bench
