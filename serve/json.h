// braid-serve's JSON: requests are read with simdjson's On-Demand parser into a small tree of
// Json values, and strings are written through nlohmann's serializer.
//
// The tree keeps numbers as views of their text, so that a tensor's values are converted once,
// straight to their datatype (std::from_chars: a float32 is rounded once, an int64 stays exact),
// and a tensor's "data" array is left as text and read leaf by leaf into the tensor. The views
// point into a padded copy of the text that the root value owns: they stay valid while the
// root lives. The reader enforces a nesting depth limit and reports errors with the byte offset.
// Not thread-safe per value; distinct values are independent.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
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
    //! An array left unparsed (see parse_json's `lazy_key`): its text, for for_each_json_leaf().
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

    //! The padded copy of the text that the views point into (set on the root only).
    std::shared_ptr<const std::string> text;
};

/*!
 * Parses `text` (one value, optional surrounding whitespace). Throws JsonError. An array that is
 * the value of an object member named `lazy_key` (when not empty) is checked but not built: its
 * Json has `lazy` set and `raw` holding its text, for for_each_json_leaf(). A tensor's "data"
 * array is read that way, straight into the tensor, without a Json per element.
 */
Json parse_json(std::string_view text, size_t max_depth = 64, std::string_view lazy_key = {});

//! Called for each leaf of a lazy array; returns false to stop.
using JsonLeafFn = bool (*)(void* state, const Json& leaf);
/*!
 * Calls `fn(state, leaf)` for each leaf (non-array value) of `lazy_array` (a Json with `lazy`
 * set, from the tree rooted at `root`) in order, nested arrays flattened; a number leaf has its
 * text in `number`, an object comes back as null. Stops early when `fn` returns false. Throws
 * JsonError for nesting deeper than `max_depth`.
 */
void for_each_json_leaf(const Json& root, const Json& lazy_array, void* state, JsonLeafFn fn,
                        size_t max_depth = 64);
//! The same with a callable `bool(const Json&)`.
template <typename F> void for_each_json_leaf(const Json& root, const Json& lazy_array, F&& f) {
    for_each_json_leaf(root, lazy_array, &f, [](void* state, const Json& leaf) {
        return (*static_cast<std::remove_reference_t<F>*>(state))(leaf);
    });
}

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
