// A minimal streaming JSON writer for the tools' --json output (one object, no dependency).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace braid::tools {

//! Builds one JSON text. Callers pair begin/end calls; keys are written by key().
class JsonWriter {
public:
    JsonWriter& begin_object() { return open('{'); }
    JsonWriter& end_object() { return close('}'); }
    JsonWriter& begin_array() { return open('['); }
    JsonWriter& end_array() { return close(']'); }
    //! The next value's key (inside an object).
    JsonWriter& key(std::string_view k) {
        separate();
        m_out += quote(k) + ":";
        m_after_key = true;
        return *this;
    }
    JsonWriter& value(std::string_view s) { return raw(quote(s)); }
    JsonWriter& value(const char* s) { return raw(quote(s)); }
    JsonWriter& value(const std::string& s) { return raw(quote(s)); }
    JsonWriter& value(bool b) { return raw(b ? "true" : "false"); }
    JsonWriter& value(double v) {
        return raw(std::isfinite(v) ? fmt::format("{}", v) : std::string("null"));
    }
    template <typename T>
    requires std::is_integral_v<T> JsonWriter& value(T v) { return raw(std::to_string(v)); }
    template <typename T> JsonWriter& field(std::string_view k, const T& v) {
        return key(k).value(v);
    }
    const std::string& str() const { return m_out; }

    static std::string quote(std::string_view s) {
        std::string r = "\"";
        for (char c : s) {
            switch (c) {
            case '"':
                r += "\\\"";
                break;
            case '\\':
                r += "\\\\";
                break;
            case '\n':
                r += "\\n";
                break;
            case '\t':
                r += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20)
                    r += fmt::format("\\u{:04x}", int(c));
                else
                    r += c;
            }
        }
        return r + "\"";
    }

private:
    void separate() {
        if (!m_first.empty() && !m_first.back()) m_out += ",";
        if (!m_first.empty()) m_first.back() = false;
    }
    JsonWriter& raw(const std::string& text) {
        if (!m_after_key) separate();
        m_after_key = false;
        m_out += text;
        return *this;
    }
    JsonWriter& open(char c) {
        if (!m_after_key) separate();
        m_after_key = false;
        m_out += c;
        m_first.push_back(true);
        return *this;
    }
    JsonWriter& close(char c) {
        m_out += c;
        m_first.pop_back();
        return *this;
    }

    std::string m_out;
    std::vector<bool> m_first;
    bool m_after_key = false;
};

} // namespace braid::tools
