#include "base/shared_library.h"

#include <dlfcn.h>

namespace braid {

SharedLibrary open_shared_library(const std::string& versioned, const std::string& unversioned) {
    SharedLibrary lib;
    lib.file = versioned;
    lib.handle = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) return lib;
    const char* first = dlerror();
    lib.error = first ? first : "unknown error";
    lib.file = unversioned;
    lib.handle = dlopen(unversioned.c_str(), RTLD_NOW | RTLD_LOCAL);
    return lib;
}

} // namespace braid
