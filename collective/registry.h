// register_all_operators(): registers the plain operator library (operators/registry.h) and
// the operators that communicate (this layer: CollectiveComm, RemoteSend/RemoteRecv, ring
// attention). Tools, tests, load() and the importers call it; it is idempotent.
#pragma once

#include "operators/registry.h"

namespace braid {

//! Registers every operator type (idempotent, thread-safe).
void register_all_operators();

} // namespace braid
