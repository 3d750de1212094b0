// A memory summary of a compiled model, computed from the executable's sequences and the
// static shapes: what braid-run --mem-report and braid-inspect print. When the executable
// has a planner report (Executable::memory_report()), the tools print that instead.
#pragma once

#include "memory/memory_budget.h"

#include "braid.h"

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace braid::tools {

//! Per comp node: planned vars, their bytes without any reuse, and the lower bound any plan
//! needs (the largest total of vars live at one step).
struct MemorySummary {
    struct Node {
        std::string comp_node;
        size_t planned_vars = 0;
        size_t planned_bytes = 0;   //!< every planned var in its own allocation
        size_t peak_live_bytes = 0; //!< lower bound of an arena
        size_t param_bytes = 0;     //!< parameters and constants (bound, not planned)
        size_t input_bytes = 0;     //!< fed inputs (bound)
        size_t dynamic_vars = 0;    //!< shape known only at execution
    };
    std::vector<Node> nodes;
    //! Several lines of text.
    std::string to_string() const;
};

//! Summarizes `exec`, whose fetched outputs are `outputs` (kept alive to the end).
MemorySummary summarize_memory(const Executable& exec, const std::vector<VarNode*>& outputs);

//! The planner's own report, when this build's Executable has memory_report(); else nullopt.
template <typename Exec> std::optional<std::string> planner_report(const Exec& exec) {
    if constexpr (requires { exec.memory_report(); }) {
        const auto& report = exec.memory_report();
        using R = std::decay_t<decltype(report)>;
        if constexpr (std::is_convertible_v<R, std::string>)
            return std::string(report);
        else if constexpr (requires { report.to_string(); })
            return std::string(report.to_string());
        else if constexpr (fmt::is_formattable<R>::value)
            return fmt::format("{}", report);
        else
            return std::nullopt;
    } else {
        return std::nullopt;
    }
}

} // namespace braid::tools
