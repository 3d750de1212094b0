#include "serve/protocol.h"

#include "serve/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace braid::serve {

namespace {

struct DatatypeName {
    embed::DType dtype;
    const char* name;
};

constexpr DatatypeName DATATYPES[] = {
    {embed::DType::FLOAT32, "FP32"},  {embed::DType::FLOAT16, "FP16"},
    {embed::DType::BFLOAT16, "BF16"}, {embed::DType::INT32, "INT32"},
    {embed::DType::INT64, "INT64"},   {embed::DType::INT8, "INT8"},
    {embed::DType::UINT8, "UINT8"},   {embed::DType::BOOL, "BOOL"},
    {embed::DType::FLOAT64, "FP64"},  {embed::DType::INT16, "INT16"},
    {embed::DType::UINT16, "UINT16"}, {embed::DType::UINT32, "UINT32"},
    {embed::DType::UINT64, "UINT64"},
};

//! The context of a request for its error messages.
struct Where {
    const ModelSignature& model;
    const std::string& request_id;

    std::string prefix() const {
        std::string s = "model \"" + model.name + "\"";
        if (!request_id.empty()) s += ", request \"" + request_id + "\"";
        return s + ": ";
    }
    [[noreturn]] void fail(const std::string& what) const {
        throw RequestError(400, prefix() + what);
    }
};

std::string names_of(const std::vector<embed::TensorInfo>& infos) {
    std::string s;
    for (auto& i : infos) s += (s.empty() ? "" : ", ") + i.name;
    return s;
}

bool special_float(const Json& v, double& out) {
    if (!v.is_string()) return false;
    if (v.string == "NaN")
        out = std::numeric_limits<double>::quiet_NaN();
    else if (v.string == "Infinity")
        out = std::numeric_limits<double>::infinity();
    else if (v.string == "-Infinity")
        out = -std::numeric_limits<double>::infinity();
    else
        return false;
    return true;
}

template <typename T> bool parse_float(const Json& v, T& out) {
    double special;
    if (special_float(v, special)) {
        out = T(special);
        return true;
    }
    if (!v.is_number()) return false;
    auto r = std::from_chars(v.number.data(), v.number.data() + v.number.size(), out);
    // Out of range: from_chars leaves `out` unchanged; the value is an overflow to infinity.
    if (r.ec == std::errc::result_out_of_range) {
        out = v.number[0] == '-' ? -std::numeric_limits<T>::infinity()
                                 : std::numeric_limits<T>::infinity();
        return true;
    }
    return r.ec == std::errc() && r.ptr == v.number.data() + v.number.size();
}

bool parse_int(const Json& v, int64_t lo, int64_t hi, int64_t& out) {
    if (v.is_bool()) {
        out = v.boolean ? 1 : 0;
        return lo <= out && out <= hi;
    }
    if (!v.is_number()) return false;
    auto r = std::from_chars(v.number.data(), v.number.data() + v.number.size(), out);
    return r.ec == std::errc() && r.ptr == v.number.data() + v.number.size() && lo <= out &&
           out <= hi;
}

//! A JSON integer from 0 to 2^64 - 1 (or a bool, as 0 or 1).
bool parse_uint64(const Json& v, uint64_t& out) {
    if (v.is_bool()) {
        out = v.boolean ? 1 : 0;
        return true;
    }
    if (!v.is_number()) return false;
    auto r = std::from_chars(v.number.data(), v.number.data() + v.number.size(), out);
    return r.ec == std::errc() && r.ptr == v.number.data() + v.number.size();
}

std::string leaf_text(const Json& v) {
    if (v.is_number()) return std::string(v.number);
    if (v.is_string()) return "\"" + v.string.substr(0, 32) + "\"";
    return v.type_name();
}

void decode_json_data(const Where& where, const Json& root, const Json& data, HostTensor& t,
                      size_t nr_elems) {
    if (!data.is_array() || !data.lazy)
        where.fail("input \"" + t.name + "\": \"data\" must be an array, got " + data.type_name());
    const Json* leaf = nullptr; // the element being converted
    auto bad = [&](size_t i) {
        where.fail("input \"" + t.name + "\": data[" + std::to_string(i) +
                   "] = " + leaf_text(*leaf) + " is not a " + datatype_name(t.dtype) + " value");
    };
    // Reads every element with `convert(i)`; the count must match the shape.
    auto each = [&](auto convert) {
        size_t count = 0;
        try {
            for_each_json_leaf(root, data, [&](const Json& l) {
                if (count < nr_elems) {
                    leaf = &l;
                    if (!convert(count)) bad(count);
                }
                ++count;
                return true;
            });
        } catch (const JsonError& e) {
            where.fail("input \"" + t.name + "\": \"data\": " + e.what());
        }
        if (count != nr_elems)
            where.fail("input \"" + t.name + "\" has shape " + shape_text(t.shape) + " (" +
                       std::to_string(nr_elems) + " elements), its data has " +
                       std::to_string(count));
    };
    auto ints = [&](auto* out, int64_t lo, int64_t hi) {
        each([&](size_t i) {
            int64_t v;
            if (!parse_int(*leaf, lo, hi, v)) return false;
            out[i] = static_cast<std::remove_pointer_t<decltype(out)>>(v);
            return true;
        });
    };
    void* p = t.data();
    switch (t.dtype) {
    case embed::DType::FLOAT32: {
        auto* out = static_cast<float*>(p);
        each([&](size_t i) { return parse_float(*leaf, out[i]); });
        break;
    }
    case embed::DType::FLOAT64: {
        auto* out = static_cast<double*>(p);
        each([&](size_t i) { return parse_float(*leaf, out[i]); });
        break;
    }
    case embed::DType::FLOAT16:
    case embed::DType::BFLOAT16: {
        // Parsed as float64 and rounded once to the 16-bit type, by braid's own converter.
        auto* out = static_cast<uint16_t*>(p);
        each([&](size_t i) {
            double d;
            if (!parse_float(*leaf, d)) return false;
            embed::convert_elements(embed::DType::FLOAT64, &d, t.dtype, &out[i], 1);
            return true;
        });
        break;
    }
    case embed::DType::INT32:
        ints(static_cast<int32_t*>(p), std::numeric_limits<int32_t>::min(),
             std::numeric_limits<int32_t>::max());
        break;
    case embed::DType::INT64:
        ints(static_cast<int64_t*>(p), std::numeric_limits<int64_t>::min(),
             std::numeric_limits<int64_t>::max());
        break;
    case embed::DType::INT8:
        ints(static_cast<int8_t*>(p), -128, 127);
        break;
    case embed::DType::UINT8:
        ints(static_cast<uint8_t*>(p), 0, 255);
        break;
    case embed::DType::INT16:
        ints(static_cast<int16_t*>(p), std::numeric_limits<int16_t>::min(),
             std::numeric_limits<int16_t>::max());
        break;
    case embed::DType::UINT16:
        ints(static_cast<uint16_t*>(p), 0, std::numeric_limits<uint16_t>::max());
        break;
    case embed::DType::UINT32:
        ints(static_cast<uint32_t*>(p), 0, std::numeric_limits<uint32_t>::max());
        break;
    case embed::DType::UINT64: {
        auto* out = static_cast<uint64_t*>(p);
        each([&](size_t i) { return parse_uint64(*leaf, out[i]); });
        break;
    }
    case embed::DType::BOOL:
        ints(static_cast<uint8_t*>(p), 0, 1);
        break;
    }
}

const Json* parameter(const Json& object, std::string_view name) {
    const Json* params = object.find("parameters");
    return params ? params->find(name) : nullptr;
}

} // namespace

const char* datatype_name(embed::DType dtype) {
    for (auto& d : DATATYPES)
        if (d.dtype == dtype) return d.name;
    return "UNKNOWN";
}

bool datatype_from_name(std::string_view name, embed::DType& dtype) {
    for (auto& d : DATATYPES)
        if (name == d.name) {
            dtype = d.dtype;
            return true;
        }
    return false;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

InferRequest decode_infer_request(std::string_view body, int64_t json_length,
                                  const ModelSignature& model) {
    InferRequest req;
    static const std::string no_id;
    if (json_length > int64_t(body.size()))
        throw RequestError(400, "model \"" + model.name +
                                    "\": Inference-Header-Content-Length is " +
                                    std::to_string(json_length) + ", the body has only " +
                                    std::to_string(body.size()) + " bytes");
    std::string_view json_text = json_length >= 0 ? body.substr(0, size_t(json_length)) : body;
    std::string_view binary = json_length >= 0 ? body.substr(size_t(json_length)) : "";
    Json doc;
    try {
        doc = parse_json(json_text, 64, "data");
    } catch (const JsonError& e) {
        throw RequestError(400, "model \"" + model.name + "\": " + e.what());
    }
    if (!doc.is_object())
        throw RequestError(400, "model \"" + model.name +
                                    "\": the request must be a JSON object, got " +
                                    doc.type_name());
    if (const Json* id = doc.find("id")) {
        if (!id->is_string())
            throw RequestError(400, "model \"" + model.name + "\": \"id\" must be a string, got " +
                                        id->type_name());
        req.id = id->string;
    }
    Where where{model, req.id};
    if (const Json* t = parameter(doc, "timeout")) {
        int64_t us;
        if (!parse_int(*t, 0, std::numeric_limits<int64_t>::max(), us))
            where.fail("parameters.timeout must be a whole number of microseconds >= 0, got " +
                       leaf_text(*t));
        req.timeout_us = us;
    }
    if (const Json* b = parameter(doc, "binary_data_output")) {
        if (!b->is_bool()) where.fail("parameters.binary_data_output must be true or false");
        req.binary_outputs = b->boolean;
    }

    const Json* inputs = doc.find("inputs");
    if (!inputs || !inputs->is_array()) where.fail("\"inputs\" must be an array of tensors");
    req.inputs.resize(model.inputs.size());
    std::vector<bool> given(model.inputs.size(), false);
    size_t binary_offset = 0;
    for (const Json& in : inputs->array) {
        const Json* name = in.find("name");
        if (!name || !name->is_string()) where.fail("every input needs a \"name\" string");
        size_t k = 0;
        while (k < model.inputs.size() && model.inputs[k].name != name->string) ++k;
        if (k == model.inputs.size())
            where.fail("the model has no input named \"" + name->string.substr(0, 64) +
                       "\" (inputs: " + names_of(model.inputs) + ")");
        if (given[k]) where.fail("input \"" + name->string + "\" is given twice");
        given[k] = true;
        const embed::TensorInfo& info = model.inputs[k];
        HostTensor& t = req.inputs[k];
        t.name = info.name;

        const Json* datatype = in.find("datatype");
        if (!datatype || !datatype->is_string())
            where.fail("input \"" + t.name + "\" needs a \"datatype\" string (expected " +
                       datatype_name(info.dtype) + ")");
        if (!datatype_from_name(datatype->string, t.dtype))
            where.fail("input \"" + t.name + "\": datatype \"" + datatype->string.substr(0, 32) +
                       "\" is not supported (expected " + datatype_name(info.dtype) + ")");
        if (t.dtype != info.dtype)
            where.fail("input \"" + t.name + "\" has datatype " + datatype_name(info.dtype) +
                       ", the request gave " + datatype->string);

        const Json* shape = in.find("shape");
        if (!shape || !shape->is_array())
            where.fail("input \"" + t.name + "\" needs a \"shape\" array (expected " +
                       shape_text(info.shape) + ")");
        size_t nr_elems = 1;
        for (const Json& d : shape->array) {
            int64_t v;
            if (!parse_int(d, 0, int64_t(1) << 40, v) || d.is_bool())
                where.fail("input \"" + t.name + "\": shape dims must be whole numbers >= 0, got " +
                           leaf_text(d));
            t.shape.push_back(v);
            if (v != 0 && nr_elems > (size_t(1) << 40) / size_t(v))
                where.fail("input \"" + t.name + "\": shape " + shape_text(t.shape) +
                           " is too large");
            nr_elems *= size_t(v);
        }
        bool fits = t.shape.size() == info.shape.size();
        for (size_t i = 0; fits && i < t.shape.size(); ++i)
            fits = info.shape[i] < 0 || info.shape[i] == t.shape[i];
        if (!fits)
            where.fail("input \"" + t.name + "\" has shape " + shape_text(info.shape) +
                       " (-1: any size), the request gave " + shape_text(t.shape));
        size_t nr_bytes = nr_elems * embed::dtype_size(t.dtype);

        const Json* data = in.find("data");
        const Json* binary_size = parameter(in, "binary_data_size");
        if (data && binary_size)
            where.fail("input \"" + t.name +
                       "\" has both \"data\" and parameters.binary_data_size");
        if (binary_size) {
            int64_t n;
            if (!parse_int(*binary_size, 0, std::numeric_limits<int64_t>::max(), n))
                where.fail("input \"" + t.name +
                           "\": parameters.binary_data_size must be a whole number >= 0");
            if (json_length < 0)
                where.fail("input \"" + t.name +
                           "\" has binary data but the request has no "
                           "Inference-Header-Content-Length header");
            if (size_t(n) != nr_bytes)
                where.fail("input \"" + t.name + "\": binary_data_size is " + std::to_string(n) +
                           ", shape " + shape_text(t.shape) + " of " + datatype->string +
                           " needs " + std::to_string(nr_bytes) + " bytes");
            if (binary_offset + nr_bytes > binary.size())
                where.fail("input \"" + t.name + "\" needs " + std::to_string(nr_bytes) +
                           " bytes of binary data at offset " + std::to_string(binary_offset) +
                           ", the body has " + std::to_string(binary.size()) +
                           " bytes after its JSON part");
            t.allocate(nr_bytes);
            if (nr_bytes) std::memcpy(t.data(), binary.data() + binary_offset, nr_bytes);
            binary_offset += nr_bytes;
        } else {
            if (!data) where.fail("input \"" + t.name + "\" has no \"data\"");
            // Each element takes at least two characters of JSON: check before allocating.
            if (nr_elems > json_text.size() / 2 + 1)
                where.fail("input \"" + t.name + "\" has shape " + shape_text(t.shape) + " (" +
                           std::to_string(nr_elems) + " elements), more than its " +
                           std::to_string(json_text.size()) + " bytes of JSON can hold");
            t.allocate(nr_bytes);
            decode_json_data(where, doc, *data, t, nr_elems);
        }
    }
    for (size_t k = 0; k < given.size(); ++k)
        if (!given[k]) where.fail("input \"" + model.inputs[k].name + "\" is missing");
    if (binary_offset != binary.size())
        where.fail("the body has " + std::to_string(binary.size()) +
                   " bytes of binary data, its inputs use " + std::to_string(binary_offset));

    if (const Json* outputs = doc.find("outputs")) {
        if (!outputs->is_array()) where.fail("\"outputs\" must be an array");
        for (const Json& out : outputs->array) {
            const Json* name = out.find("name");
            if (!name || !name->is_string()) where.fail("every requested output needs a \"name\"");
            bool known = false;
            for (auto& o : model.outputs) known = known || o.name == name->string;
            if (!known)
                where.fail("the model has no output named \"" + name->string.substr(0, 64) +
                           "\" (outputs: " + names_of(model.outputs) + ")");
            RequestedOutput r{name->string, req.binary_outputs};
            if (const Json* b = parameter(out, "binary_data")) {
                if (!b->is_bool())
                    where.fail("output \"" + r.name +
                               "\": parameters.binary_data must be true "
                               "or false");
                r.binary = b->boolean;
            }
            req.outputs.push_back(std::move(r));
        }
    }
    return req;
}

namespace {

//! One output of a response: which, its values, and whether it goes as binary data.
struct OutputView {
    const embed::TensorInfo* info = nullptr;
    OutputData values;
    bool binary = false;
};

//! The outputs `request` asked for, in its order (all, in the model's order, when none).
std::vector<OutputView> select_outputs(const ModelSignature& model, const InferRequest& request,
                                       const std::function<OutputData(size_t)>& output) {
    std::vector<OutputView> views;
    auto add = [&](size_t k, bool binary) {
        views.push_back(OutputView{&model.outputs[k], output(k), binary});
    };
    if (request.outputs.empty()) {
        for (size_t k = 0; k < model.outputs.size(); ++k) add(k, request.binary_outputs);
        return views;
    }
    for (auto& r : request.outputs) // names were checked when the request was decoded
        for (size_t k = 0; k < model.outputs.size(); ++k)
            if (model.outputs[k].name == r.name) add(k, r.binary);
    return views;
}

} // namespace

int64_t encode_infer_response(std::string& body, const ModelSignature& model,
                              const InferRequest& request,
                              const std::function<OutputData(size_t)>& output) {
    std::vector<OutputView> outputs = select_outputs(model, request, output);
    body.clear();
    body += "{\"model_name\":";
    append_json_string(body, model.name);
    body += ",\"model_version\":\"1\"";
    if (!request.id.empty()) {
        body += ",\"id\":";
        append_json_string(body, request.id);
    }
    body += ",\"outputs\":[";
    bool any_binary = false;
    for (size_t k = 0; k < outputs.size(); ++k) {
        const OutputView& o = outputs[k];
        if (k) body += ',';
        body += "{\"name\":";
        append_json_string(body, o.info->name);
        body += ",\"datatype\":\"";
        body += datatype_name(o.info->dtype);
        body += "\",\"shape\":[";
        for (size_t i = 0; i < o.values.shape.size(); ++i) {
            if (i) body += ',';
            append_json_number(body, o.values.shape[i]);
        }
        body += ']';
        if (o.binary) {
            any_binary = true;
            body += ",\"parameters\":{\"binary_data_size\":";
            append_json_number(body, uint64_t(o.values.bytes));
            body += "}}";
            continue;
        }
        body += ",\"data\":[";
        size_t n = o.values.bytes / embed::dtype_size(o.info->dtype);
        auto each = [&](auto write) {
            for (size_t i = 0; i < n; ++i) {
                if (i) body += ',';
                write(i);
            }
        };
        const void* p = o.values.data;
        switch (o.info->dtype) {
        case embed::DType::FLOAT32:
            each([&](size_t i) { append_json_number(body, static_cast<const float*>(p)[i]); });
            break;
        case embed::DType::FLOAT64:
            each([&](size_t i) { append_json_number(body, static_cast<const double*>(p)[i]); });
            break;
        case embed::DType::FLOAT16:
        case embed::DType::BFLOAT16: // widened to float32 (exact), by braid's own converter
            each([&](size_t i) {
                float f;
                embed::convert_elements(o.info->dtype, static_cast<const uint16_t*>(p) + i,
                                        embed::DType::FLOAT32, &f, 1);
                append_json_number(body, f);
            });
            break;
        case embed::DType::INT32:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const int32_t*>(p)[i]));
            });
            break;
        case embed::DType::INT64:
            each([&](size_t i) { append_json_number(body, static_cast<const int64_t*>(p)[i]); });
            break;
        case embed::DType::INT8:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const int8_t*>(p)[i]));
            });
            break;
        case embed::DType::UINT8:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const uint8_t*>(p)[i]));
            });
            break;
        case embed::DType::INT16:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const int16_t*>(p)[i]));
            });
            break;
        case embed::DType::UINT16:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const uint16_t*>(p)[i]));
            });
            break;
        case embed::DType::UINT32:
            each([&](size_t i) {
                append_json_number(body, int64_t(static_cast<const uint32_t*>(p)[i]));
            });
            break;
        case embed::DType::UINT64:
            each([&](size_t i) { append_json_number(body, static_cast<const uint64_t*>(p)[i]); });
            break;
        case embed::DType::BOOL:
            each([&](size_t i) { body += static_cast<const uint8_t*>(p)[i] ? "true" : "false"; });
            break;
        }
        body += "]}";
    }
    body += "]}";
    if (!any_binary) return -1;
    int64_t json_length = int64_t(body.size());
    for (const OutputView& o : outputs)
        if (o.binary && o.values.bytes)
            body.append(static_cast<const char*>(o.values.data), o.values.bytes);
    return json_length;
}

std::string error_body(std::string_view message) {
    std::string s = "{\"error\":";
    append_json_string(s, message);
    return s + "}";
}

} // namespace braid::serve
