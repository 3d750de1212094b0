#include "tools/process_memory.h"

#include <fstream>
#include <sstream>

namespace braid::tools {

namespace {

//! "VmRSS:     1234 kB" -> 1234 * 1024 when the line starts with `key`.
bool read_kib(const std::string& line, const char* key, size_t& out) {
    std::string k(key);
    if (line.compare(0, k.size(), k) != 0) return false;
    std::istringstream in(line.substr(k.size()));
    size_t kib = 0;
    if (in >> kib) out = kib * 1024;
    return true;
}

} // namespace

ProcessMemory read_process_memory() {
    ProcessMemory m;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        read_kib(line, "VmRSS:", m.rss) || read_kib(line, "VmHWM:", m.peak_rss) ||
            read_kib(line, "RssAnon:", m.anon) || read_kib(line, "RssFile:", m.file);
    // smaps: a mapping's header line ("start-end perms offset dev inode [path]"), then its
    // fields; writable-executable mappings without a path hold generated code.
    std::ifstream smaps("/proc/self/smaps");
    bool jit = false;
    for (std::string line; std::getline(smaps, line);) {
        std::istringstream in(line);
        std::string range, perms, offset, dev, inode, path;
        if (line.find('-') < line.find(' ') && (in >> range >> perms >> offset >> dev >> inode)) {
            in >> path;
            jit = perms.size() >= 3 && perms[1] == 'w' && perms[2] == 'x' && path.empty();
            continue;
        }
        size_t bytes = 0;
        if (jit && read_kib(line, "Rss:", bytes)) m.jit_code += bytes;
    }
    return m;
}

} // namespace braid::tools
