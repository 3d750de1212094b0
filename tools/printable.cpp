#include "tools/printable.h"

#include <fmt/format.h>

#include <cstdint>

namespace braid::tools {

namespace {

//! Length of the valid UTF-8 sequence of a printable code point at `s[i]`, or 0.
size_t printable_utf8_length(std::string_view s, size_t i) {
    auto byte = [&](size_t k) { return uint8_t(s[k]); };
    uint8_t b = byte(i);
    size_t len = b >= 0xf0 && b <= 0xf4 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 && b < 0xe0 ? 2 : 0;
    if (!len || i + len > s.size()) return 0;
    uint32_t cp = b & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
        if ((byte(i + k) & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (byte(i + k) & 0x3f);
    }
    bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    bool invalid = cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff);
    bool c1_control = cp >= 0x80 && cp <= 0x9f;
    return overlong || invalid || c1_control ? 0 : len;
}

} // namespace

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        uint8_t c = uint8_t(text[i]);
        if (c >= 0x20 && c < 0x7f) {
            if (c == '\\') out += '\\';
            out += char(c);
            ++i;
        } else if (c == '\n') {
            out += "\\n", ++i;
        } else if (c == '\t') {
            out += "\\t", ++i;
        } else if (c == '\r') {
            out += "\\r", ++i;
        } else if (size_t len = c >= 0x80 ? printable_utf8_length(text, i) : 0) {
            out.append(text.substr(i, len));
            i += len;
        } else {
            out += fmt::format("\\x{:02x}", c);
            ++i;
        }
    }
    return out;
}

} // namespace braid::tools
