#include "serve/json.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstring>

namespace braid::serve {

const Json* Json::find(std::string_view key) const {
    if (type != Type::OBJECT) return nullptr;
    for (auto& [k, v] : members)
        if (k == key) return &v;
    return nullptr;
}

const char* Json::type_name() const {
    switch (type) {
    case Type::NUL:
        return "null";
    case Type::BOOL:
        return "bool";
    case Type::NUMBER:
        return "number";
    case Type::STRING:
        return "string";
    case Type::ARRAY:
        return "array";
    case Type::OBJECT:
        return "object";
    }
    return "?";
}

namespace {

class Parser {
public:
    Parser(std::string_view text, size_t max_depth, std::string_view lazy_key = {})
        : m_text(text), m_max_depth(max_depth), m_lazy_key(lazy_key) {}

    //! Parses the value at `pos` (a leaf of an already checked array); returns the end.
    size_t parse_leaf_at(size_t pos, Json& v) {
        m_pos = pos;
        parse_value(v, 0);
        return m_pos;
    }

    Json parse_document() {
        Json v;
        skip_space();
        parse_value(v, 0);
        skip_space();
        if (m_pos != m_text.size()) fail("unexpected text after the value");
        return v;
    }

private:
    std::string_view m_text;
    size_t m_pos = 0;
    size_t m_max_depth;
    std::string_view m_lazy_key;

    [[noreturn]] void fail(const std::string& what) const {
        throw JsonError("invalid JSON at byte " + std::to_string(m_pos) + ": " + what);
    }
    bool at_end() const { return m_pos >= m_text.size(); }
    char peek() const { return at_end() ? '\0' : m_text[m_pos]; }
    void skip_space() {
        while (m_pos < m_text.size()) {
            char c = m_text[m_pos];
            if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
            ++m_pos;
        }
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++m_pos;
    }
    void literal(std::string_view word) {
        if (m_text.substr(m_pos, word.size()) != word) fail("unknown literal");
        m_pos += word.size();
    }

    void parse_value(Json& v, size_t depth) {
        if (depth > m_max_depth)
            fail("nesting deeper than " + std::to_string(m_max_depth) + " levels");
        char c = peek();
        switch (c) {
        case '{':
            parse_object(v, depth);
            return;
        case '[':
            parse_array(v, depth);
            return;
        case '"':
            v.type = Json::Type::STRING;
            parse_string(v.string);
            return;
        case 't':
            literal("true");
            v.type = Json::Type::BOOL;
            v.boolean = true;
            return;
        case 'f':
            literal("false");
            v.type = Json::Type::BOOL;
            return;
        case 'n':
            literal("null");
            return;
        default:
            if (c == '-' || (c >= '0' && c <= '9')) {
                parse_number(v);
                return;
            }
            fail(at_end() ? "unexpected end of text" : "unexpected character");
        }
    }

    void parse_object(Json& v, size_t depth) {
        v.type = Json::Type::OBJECT;
        ++m_pos;
        skip_space();
        if (peek() == '}') {
            ++m_pos;
            return;
        }
        for (;;) {
            skip_space();
            if (peek() != '"') fail("expected a member name");
            std::string key;
            parse_string(key);
            skip_space();
            expect(':');
            skip_space();
            bool lazy = !m_lazy_key.empty() && key == m_lazy_key && peek() == '[';
            v.members.emplace_back(std::move(key), Json{});
            Json& member = v.members.back().second;
            if (lazy) {
                // Checked as usual, but into a scratch value whose items are dropped as soon
                // as parsed; the member keeps only the text.
                size_t start = m_pos;
                check_array(depth + 1);
                member.type = Json::Type::ARRAY;
                member.lazy = true;
                member.raw = m_text.substr(start, m_pos - start);
            } else {
                parse_value(member, depth + 1);
            }
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                continue;
            }
            expect('}');
            return;
        }
    }

    //! Checks an array without keeping its items.
    void check_array(size_t depth) {
        if (depth > m_max_depth)
            fail("nesting deeper than " + std::to_string(m_max_depth) + " levels");
        ++m_pos;
        skip_space();
        if (peek() == ']') {
            ++m_pos;
            return;
        }
        Json scratch;
        for (;;) {
            skip_space();
            char c = peek();
            if (c == '[') {
                check_array(depth + 1);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                parse_number(scratch);
            } else {
                scratch = Json{};
                parse_value(scratch, depth + 1);
            }
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                continue;
            }
            expect(']');
            return;
        }
    }

    void parse_array(Json& v, size_t depth) {
        v.type = Json::Type::ARRAY;
        ++m_pos;
        skip_space();
        if (peek() == ']') {
            ++m_pos;
            return;
        }
        for (;;) {
            skip_space();
            v.array.emplace_back();
            parse_value(v.array.back(), depth + 1);
            skip_space();
            if (peek() == ',') {
                ++m_pos;
                continue;
            }
            expect(']');
            return;
        }
    }

    void parse_number(Json& v) {
        size_t start = m_pos;
        if (peek() == '-') ++m_pos;
        if (peek() == '0') {
            ++m_pos;
        } else if (peek() >= '1' && peek() <= '9') {
            while (peek() >= '0' && peek() <= '9') ++m_pos;
        } else {
            fail("a number needs digits");
        }
        if (peek() == '.') {
            ++m_pos;
            if (!(peek() >= '0' && peek() <= '9')) fail("a number needs digits after '.'");
            while (peek() >= '0' && peek() <= '9') ++m_pos;
        }
        if (peek() == 'e' || peek() == 'E') {
            ++m_pos;
            if (peek() == '+' || peek() == '-') ++m_pos;
            if (!(peek() >= '0' && peek() <= '9')) fail("a number needs digits in its exponent");
            while (peek() >= '0' && peek() <= '9') ++m_pos;
        }
        v.type = Json::Type::NUMBER;
        v.number = m_text.substr(start, m_pos - start);
    }

    static int hex_digit(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    unsigned parse_hex4() {
        if (m_pos + 4 > m_text.size()) fail("truncated \\u escape");
        unsigned u = 0;
        for (int i = 0; i < 4; ++i) {
            int d = hex_digit(m_text[m_pos++]);
            if (d < 0) fail("bad \\u escape");
            u = u * 16 + unsigned(d);
        }
        return u;
    }

    static void append_utf8(std::string& out, unsigned cp) {
        if (cp < 0x80) {
            out += char(cp);
        } else if (cp < 0x800) {
            out += char(0xC0 | (cp >> 6));
            out += char(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        } else {
            out += char(0xF0 | (cp >> 18));
            out += char(0x80 | ((cp >> 12) & 0x3F));
            out += char(0x80 | ((cp >> 6) & 0x3F));
            out += char(0x80 | (cp & 0x3F));
        }
    }

    void parse_string(std::string& out) {
        ++m_pos; // the opening quote
        for (;;) {
            if (at_end()) fail("unterminated string");
            char c = m_text[m_pos++];
            if (c == '"') return;
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
            if (c != '\\') {
                out += c;
                continue;
            }
            if (at_end()) fail("unterminated string");
            char e = m_text[m_pos++];
            switch (e) {
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case '/':
                out += '/';
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                unsigned cp = parse_hex4();
                if (cp >= 0xD800 && cp < 0xDC00) {
                    if (m_text.substr(m_pos, 2) != "\\u") fail("unpaired surrogate");
                    m_pos += 2;
                    unsigned low = parse_hex4();
                    if (low < 0xDC00 || low >= 0xE000) fail("unpaired surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    fail("unpaired surrogate");
                }
                append_utf8(out, cp);
                break;
            }
            default:
                fail("bad escape");
            }
        }
    }
};

template <typename T> void append_shortest(std::string& out, T v) {
    if (std::isnan(v)) {
        out += "\"NaN\"";
        return;
    }
    if (std::isinf(v)) {
        out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
        return;
    }
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

} // namespace

Json parse_json(std::string_view text, size_t max_depth, std::string_view lazy_key) {
    return Parser(text, max_depth, lazy_key).parse_document();
}

bool JsonLeafReader::next(Json& leaf) {
    for (;;) {
        while (m_pos < m_text.size()) {
            char c = m_text[m_pos];
            if (c != '[' && c != ']' && c != ',' && c != ' ' && c != '\n' && c != '\r' && c != '\t')
                break;
            ++m_pos;
        }
        if (m_pos >= m_text.size()) return false;
        char c = m_text[m_pos];
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = m_pos;
            while (m_pos < m_text.size()) {
                char d = m_text[m_pos];
                if (!((d >= '0' && d <= '9') || d == '-' || d == '+' || d == '.' || d == 'e' ||
                      d == 'E'))
                    break;
                ++m_pos;
            }
            leaf.type = Json::Type::NUMBER;
            leaf.number = m_text.substr(start, m_pos - start);
            return true;
        }
        // A string, literal or object: the full parser (the text was checked already).
        leaf = Json{};
        Parser parser(m_text, 1u << 20);
        m_pos = parser.parse_leaf_at(m_pos, leaf);
        if (leaf.is_object() || leaf.is_array()) leaf = Json{};
        return true;
    }
}

void append_json_string(std::string& out, std::string_view s) {
    // nlohmann's serializer escapes; invalid UTF-8 becomes U+FFFD rather than an error.
    out += nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void append_json_number(std::string& out, double v) {
    append_shortest(out, v);
}
void append_json_number(std::string& out, float v) {
    append_shortest(out, v);
}

void append_json_number(std::string& out, int64_t v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void append_json_number(std::string& out, uint64_t v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

} // namespace braid::serve
