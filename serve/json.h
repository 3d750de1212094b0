// A small, strict JSON reader and writer for braid-serve's protocol messages.
//
// The reader builds a tree of Json values from text that must stay alive (and unchanged) as long
// as the tree: numbers keep a view of their text, so that a tensor's values are converted once,
// straight to their datatype (std::from_chars: a float32 is rounded once, an int64 stays exact).
// It enforces a nesting depth limit and reports errors with the byte offset. Not thread-safe per
// value; distinct values are independent.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::serve {

//! A syntax error in JSON text; what() names the byte offset.
class JsonError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

//! One JSON value: null, bool, number, string, array or object (keys in document order).
class Json {
public:
    enum class Type { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT };

    Type type = Type::NUL;
    bool boolean = false;
    //! An array left unparsed (see parse_json's `lazy_key`): its text, read with JsonLeafReader.
    bool lazy = false;
    std::string_view raw;
    std::string_view number;                           //!< a number's text
    std::string string;                                //!< a string, unescaped
    std::vector<Json> array;                           //!< an array's items
    std::vector<std::pair<std::string, Json>> members; //!< an object's members

    bool is_null() const { return type == Type::NUL; }
    bool is_number() const { return type == Type::NUMBER; }
    bool is_string() const { return type == Type::STRING; }
    bool is_array() const { return type == Type::ARRAY; }
    bool is_object() const { return type == Type::OBJECT; }
    bool is_bool() const { return type == Type::BOOL; }
    //! The member named `key` of an object, or nullptr (also for a non-object).
    const Json* find(std::string_view key) const;
    //! The type's name ("number"), for error messages.
    const char* type_name() const;
};

/*!
 * Parses `text` (one value, optional surrounding whitespace). Throws JsonError. An array that is
 * the value of an object member named `lazy_key` (when not empty) is checked but not built: its
 * Json has `lazy` set and `raw` holding its text, for JsonLeafReader. A tensor's "data" array
 * is read that way, straight into the tensor, without a Json per element.
 */
Json parse_json(std::string_view text, size_t max_depth = 64, std::string_view lazy_key = {});

//! Reads the leaves (non-array values) of a checked array's text in order, flattening nested
//! arrays. The text must come from a Json with `lazy` set (already checked).
class JsonLeafReader {
public:
    explicit JsonLeafReader(std::string_view raw) : m_text(raw) {}
    //! The next leaf into `leaf` (a number, string, bool or null; objects are not expected in
    //! tensor data and come back as null); false after the last one.
    bool next(Json& leaf);

private:
    std::string_view m_text;
    size_t m_pos = 0;
};

//! Appends `s` as a JSON string literal (quoted and escaped).
void append_json_string(std::string& out, std::string_view s);
//! Appends a double as its shortest round-trip text; NaN and infinities as "NaN",
//! "Infinity" and "-Infinity" (strings, as JSON has no literal for them).
void append_json_number(std::string& out, double v);
//! Appends a float32 as its shortest round-trip text (same rules for non-finite values).
void append_json_number(std::string& out, float v);
void append_json_number(std::string& out, int64_t v);
void append_json_number(std::string& out, uint64_t v);

} // namespace braid::serve
