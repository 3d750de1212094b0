// Text from a model file (producer, metadata, names) and error messages that quote it, made
// safe for a terminal: control characters and bytes that are not valid UTF-8 are escaped, so a
// file cannot send escape sequences to the user's terminal.
#pragma once

#include <string>
#include <string_view>

namespace braid::tools {

//! `text` with \n, \t, \r, \\ and every other control character (C0, DEL, and C1 as UTF-8) or
//! invalid UTF-8 byte written as an escape ("\x1b"); printable UTF-8 passes unchanged.
std::string printable(std::string_view text);

} // namespace braid::tools
