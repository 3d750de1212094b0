// register_operator_library(): registers every family of the plain operator library
// (graph/operator_registry.h), one call per family. Each family registers its own types from
// its own file (operators/<family>.cpp: register_<family>_operators()), with their params
// functions, gradient rules and kernels. Registration is explicit so that no operator depends
// on the linker keeping a static constructor. It is idempotent. Programs call
// register_all_operators() (collective/registry.h), which adds the collective operators.
#pragma once

#include "graph/operator_registry.h"

namespace braid {

//! Registers every family of the plain operator library (idempotent, thread-safe).
void register_operator_library();

} // namespace braid
