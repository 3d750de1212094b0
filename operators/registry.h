// register_all_operators(): registers every operator family's descriptors
// (graph/operator_registry.h), one call per family. Each family registers its own types from
// its own file (operators/<family>.cpp: register_<family>_operators()), with their params
// functions, gradient rules and kernels. Registration is explicit so that no operator depends
// on the linker keeping a static constructor. Tools, tests and load() call it; it is idempotent.
#pragma once

#include "graph/operator_registry.h"

namespace braid {

//! Registers every operator family (idempotent, thread-safe).
void register_all_operators();

} // namespace braid
