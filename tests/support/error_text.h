// The message of what a call throws, for tests that check an error's words.
#pragma once

#include <exception>
#include <string>

namespace braid::testing {

//! The what() of the std::exception `f` throws, or "" when it throws none.
template <typename F> std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

} // namespace braid::testing
