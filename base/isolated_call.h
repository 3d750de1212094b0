// run_isolated: runs a function in a forked child process, so that a crash or a hang in code
// braid does not control (a third-party parser fed a hostile file) cannot take the caller's
// process down with it.
//
// The child runs `fn`, writes the bytes it returns to a pipe and exits; the parent reads them
// until `limit`, then kills the child. The child must not take locks other threads of the
// parent may hold at the fork (the logger's, a pool's): it runs only `fn`, with a copy of the
// parent's memory. Thread-safe.
#pragma once

#include <chrono>

#include <functional>
#include <string>

namespace braid {

/*!
 * Runs `fn` in a child process and returns what it returned. Throws SerializationError naming
 * `what` when the child dies of a signal (and which), exits without a result, or runs past
 * `limit` (then it is killed); an exception `fn` throws comes back as a SerializationError
 * with its message.
 */
std::string run_isolated(const std::function<std::string()>& fn, const std::string& what,
                         std::chrono::milliseconds limit);

} // namespace braid
