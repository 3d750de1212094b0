// open_shared_library(): a library braid loads only when it first needs it (cuBLAS, cuDNN),
// by its versioned soname first, then by its unversioned name.
#pragma once

#include <string>

namespace braid {

struct SharedLibrary {
    void* handle = nullptr; //!< dlopen's handle; null when no name loaded
    std::string file;       //!< the name that loaded
    std::string error;      //!< when none did: what loading the first name said
};

//! dlopen (RTLD_NOW | RTLD_LOCAL) of `versioned`, else of `unversioned`.
SharedLibrary open_shared_library(const std::string& versioned, const std::string& unversioned);

} // namespace braid
