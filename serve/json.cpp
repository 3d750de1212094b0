#include "serve/json.h"

#include <nlohmann/json.hpp>
#include <simdjson.h>

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

namespace od = simdjson::ondemand;

[[noreturn]] void fail_at(size_t offset, const std::string& what) {
    throw JsonError("invalid JSON at byte " + std::to_string(offset) + ": " + what);
}

//! A number token's text without the whitespace simdjson keeps after it.
std::string_view number_text(std::string_view token) {
    while (!token.empty() && (token.back() == ' ' || token.back() == '\n' || token.back() == '\r' ||
                              token.back() == '\t'))
        token.remove_suffix(1);
    return token;
}

//! Builds the tree of one document; the text lives in `begin`'s buffer.
class TreeBuilder {
public:
    TreeBuilder(const char* begin, size_t max_depth, std::string_view lazy_key)
        : m_begin(begin), m_max_depth(max_depth), m_lazy_key(lazy_key) {}

    template <typename V> void build(V& v, Json& out, size_t depth) {
        if (depth > m_max_depth)
            fail(v, "nesting deeper than " + std::to_string(m_max_depth) + " levels");
        switch (v.type().value()) {
        case od::json_type::object:
            out.type = Json::Type::OBJECT;
            for (auto field : v.get_object()) {
                std::string key(field.unescaped_key().value());
                od::value fv = field.value();
                Json child;
                if (!m_lazy_key.empty() && key == m_lazy_key &&
                    fv.type().value() == od::json_type::array) {
                    child.type = Json::Type::ARRAY;
                    child.lazy = true;
                    od::array items = fv.get_array();
                    child.raw = items.raw_json().value();
                } else {
                    build(fv, child, depth + 1);
                }
                out.members.emplace_back(std::move(key), std::move(child));
            }
            return;
        case od::json_type::array:
            out.type = Json::Type::ARRAY;
            for (auto item : v.get_array()) {
                od::value iv = item.value();
                out.array.emplace_back();
                build(iv, out.array.back(), depth + 1);
            }
            return;
        case od::json_type::number:
            v.get_number().value(); // checks the token
            out.type = Json::Type::NUMBER;
            out.number = number_text(v.raw_json_token());
            return;
        case od::json_type::string:
            out.type = Json::Type::STRING;
            out.string = std::string(v.get_string().value());
            return;
        case od::json_type::boolean:
            out.type = Json::Type::BOOL;
            out.boolean = v.get_bool().value();
            return;
        case od::json_type::null:
            if (!v.is_null().value()) fail(v, "unknown literal");
            return;
        }
    }

    template <typename V> [[noreturn]] void fail(V& v, const std::string& what) const {
        auto loc = v.current_location();
        fail_at(loc.error() ? 0 : size_t(loc.value_unsafe() - m_begin), what);
    }

private:
    const char* m_begin;
    size_t m_max_depth;
    std::string_view m_lazy_key;
};

//! Visits the leaves of one (checked) array in order, nested arrays flattened.
struct LeafVisitor {
    void* state;
    JsonLeafFn fn;
    size_t max_depth;
    Json leaf;
    size_t visited = 0; //!< leaves passed to `fn`, for error messages

    //! False once `fn` asked to stop. The leaf is reused: only the fields of its type are
    //! set (a fresh Json per element would cost more than reading the number).
    bool visit(od::value v, size_t depth) {
        switch (v.type().value()) {
        case od::json_type::array:
            if (depth >= max_depth)
                throw JsonError("nesting deeper than " + std::to_string(max_depth) + " levels");
            for (auto item : v.get_array())
                if (!visit(item.value(), depth + 1)) return false;
            return true;
        case od::json_type::number:
            leaf.type = Json::Type::NUMBER;
            leaf.number = number_text(v.raw_json_token());
            break;
        case od::json_type::string:
            leaf.type = Json::Type::STRING;
            leaf.string = std::string(v.get_string().value());
            break;
        case od::json_type::boolean:
            leaf.type = Json::Type::BOOL;
            leaf.boolean = v.get_bool().value();
            break;
        default: // null, or an object (not expected in tensor data): null
            leaf.type = Json::Type::NUL;
            break;
        }
        ++visited;
        return fn(state, leaf);
    }
};

//! A reusable On-Demand parser per thread (it keeps its buffers between documents).
od::parser& thread_parser() {
    thread_local od::parser parser;
    return parser;
}

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
    // simdjson reads past the end of the text: parse a copy with its padding, which the tree's
    // views then point into.
    auto buf = std::make_shared<std::string>();
    buf->reserve(text.size() + simdjson::SIMDJSON_PADDING);
    buf->append(text);
    buf->append(simdjson::SIMDJSON_PADDING, ' ');
    Json root;
    od::document doc;
    bool started = false;
    TreeBuilder builder(buf->data(), max_depth, lazy_key);
    try {
        doc = thread_parser().iterate(
            simdjson::padded_string_view(buf->data(), text.size(), buf->size()));
        started = true;
        switch (doc.type().value()) {
        case od::json_type::object:
        case od::json_type::array: {
            od::value v = doc.get_value();
            builder.build(v, root, 0);
            break;
        }
        default: // a scalar document
            builder.build(doc, root, 0);
        }
        // Fully read, the document has no location left; one left is text after the value.
        if (!doc.current_location().error()) builder.fail(doc, "unexpected text after the value");
    } catch (const simdjson::simdjson_error& e) {
        size_t offset = text.size();
        if (started) {
            auto loc = doc.current_location();
            if (!loc.error()) offset = size_t(loc.value_unsafe() - buf->data());
        }
        fail_at(offset, e.what());
    }
    root.text = std::move(buf);
    return root;
}

void for_each_json_leaf(const Json& root, const Json& lazy_array, void* state, JsonLeafFn fn,
                        size_t max_depth) {
    if (!lazy_array.lazy || !root.text) return;
    const char* end = root.text->data() + root.text->size();
    LeafVisitor visitor{state, fn, max_depth, {}};
    try {
        od::document doc = thread_parser().iterate(simdjson::padded_string_view(
            lazy_array.raw.data(), lazy_array.raw.size(), size_t(end - lazy_array.raw.data())));
        visitor.visit(doc.get_value(), 0);
    } catch (const simdjson::simdjson_error& e) {
        throw JsonError("invalid JSON in an array at element " + std::to_string(visitor.visited) +
                        " (counting from 0, nested arrays flattened): " + e.what());
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
