// The memory this process holds, from Linux's /proc/self/status and /proc/self/smaps: what
// braid-run reports next to what a model needs (docs/performance.md, memory overhead).
#pragma once

#include <cstddef>
#include <string>

namespace braid::tools {

//! Bytes; all zero where /proc cannot be read.
struct ProcessMemory {
    size_t rss = 0;      //!< resident now (VmRSS)
    size_t peak_rss = 0; //!< the most ever resident (VmHWM)
    size_t anon = 0;     //!< resident anonymous memory (RssAnon): heap, stacks, JIT code
    size_t file = 0;     //!< resident file-backed pages (RssFile): code, mapped models
    size_t jit_code = 0; //!< of `anon`, writable-executable mappings: generated kernels
};

//! The process's memory now; jit_code needs a pass over smaps (a few hundred microseconds).
ProcessMemory read_process_memory();

} // namespace braid::tools
