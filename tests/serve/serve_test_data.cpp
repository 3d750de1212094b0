// The data side of braid-serve's script tests: writes an input as .npy (for braid-run) and as
// an inference request (JSON, and JSON + binary tensor data), and checks a response against a
// .npy written by braid-run, value for value (bit-exact). The requests themselves go through
// curl in the test scripts.
//
//     serve_test_data make-input DIR INPUT_NAME D0xD1x... SEED
//         -> DIR/input.npy, DIR/request.json, DIR/request.bin, DIR/request.bin.len
//     serve_test_data check-json RESPONSE OUTPUT_NAME EXPECTED.npy
//     serve_test_data check-binary RESPONSE JSON_LENGTH OUTPUT_NAME EXPECTED.npy
//
// Exit status 0 when equal, 1 with a message naming the first difference, 2 on usage errors.
#include "serve/json.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace braid::serve;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    if (!out) throw std::runtime_error("cannot write " + path);
}

struct Npy {
    std::vector<int64_t> shape;
    std::vector<float> values;
};

std::string npy_bytes(const std::vector<int64_t>& shape, const std::vector<float>& values) {
    std::string dims;
    for (auto d : shape) dims += std::to_string(d) + ", ";
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::string out = "\x93NUMPY\x01";
    out += '\0';
    out += char(header.size() & 0xFF);
    out += char(header.size() >> 8);
    out += header;
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    return out;
}

Npy read_npy(const std::string& path) {
    std::string bytes = read_file(path);
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
        throw std::runtime_error(path + ": not a .npy file");
    size_t header_len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
    std::string header = bytes.substr(10, header_len);
    if (header.find("'<f4'") == std::string::npos)
        throw std::runtime_error(path + ": expected float32 ('<f4'), header " + header);
    Npy npy;
    size_t open = header.find('('), close = header.find(')');
    std::string dims = header.substr(open + 1, close - open - 1);
    for (size_t i = 0; i < dims.size();) {
        while (i < dims.size() && (dims[i] < '0' || dims[i] > '9')) ++i;
        if (i >= dims.size()) break;
        int64_t d = 0;
        auto r = std::from_chars(dims.data() + i, dims.data() + dims.size(), d);
        npy.shape.push_back(d);
        i = size_t(r.ptr - dims.data());
    }
    size_t n = 1;
    for (auto d : npy.shape) n *= size_t(d);
    size_t offset = 10 + header_len;
    if (bytes.size() != offset + n * 4)
        throw std::runtime_error(path + ": size does not match its shape");
    npy.values.resize(n);
    std::memcpy(npy.values.data(), bytes.data() + offset, n * 4);
    return npy;
}

std::vector<int64_t> parse_shape(const std::string& text) {
    std::vector<int64_t> shape;
    std::stringstream ss(text);
    std::string part;
    while (std::getline(ss, part, 'x')) shape.push_back(std::stoll(part));
    return shape;
}

std::string shape_json(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

int make_input(const std::string& dir, const std::string& name, const std::string& shape_text,
               unsigned seed) {
    auto shape = parse_shape(shape_text);
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (auto& v : values) v = dist(rng); // full float32 precision: JSON must round-trip it
    write_file(dir + "/input.npy", npy_bytes(shape, values));

    std::string json = "{\"id\":\"compare\",\"inputs\":[{\"name\":";
    append_json_string(json, name);
    json += ",\"datatype\":\"FP32\",\"shape\":" + shape_json(shape) + ",\"data\":[";
    for (size_t i = 0; i < n; ++i) {
        if (i) json += ',';
        append_json_number(json, values[i]);
    }
    json += "]}]}";
    write_file(dir + "/request.json", json);

    std::string header = "{\"id\":\"compare-binary\",\"inputs\":[{\"name\":";
    append_json_string(header, name);
    header += ",\"datatype\":\"FP32\",\"shape\":" + shape_json(shape) +
              ",\"parameters\":{\"binary_data_size\":" + std::to_string(n * 4) +
              "}}],\"parameters\":{\"binary_data_output\":true}}";
    std::string body = header;
    body.append(reinterpret_cast<const char*>(values.data()), n * 4);
    write_file(dir + "/request.bin", body);
    write_file(dir + "/request.bin.len", std::to_string(header.size()));
    return 0;
}

const Json& find_output(const Json& doc, const std::string& name) {
    const Json* outputs = doc.find("outputs");
    if (!outputs || !outputs->is_array()) throw std::runtime_error("response has no outputs");
    for (const Json& o : outputs->array)
        if (const Json* n = o.find("name"); n && n->string == name) return o;
    throw std::runtime_error("response has no output " + name);
}

void check_shape(const Json& out, const Npy& expected) {
    const Json* shape = out.find("shape");
    std::vector<int64_t> seen;
    for (const Json& d : shape->array) seen.push_back(std::stoll(std::string(d.number)));
    if (seen != expected.shape)
        throw std::runtime_error("shape " + shape_json(seen) + ", braid-run gave " +
                                 shape_json(expected.shape));
}

int fail_at(size_t i, float seen, float expected) {
    std::fprintf(stderr, "value %zu: braid-serve %.9g, braid-run %.9g\n", i, seen, expected);
    return 1;
}

int check_json(const std::string& response, const std::string& name, const std::string& npy) {
    std::string text = read_file(response);
    Json doc = parse_json(text);
    const Json& out = find_output(doc, name);
    Npy expected = read_npy(npy);
    check_shape(out, expected);
    const Json* data = out.find("data");
    if (!data || data->array.size() != expected.values.size())
        throw std::runtime_error("data has the wrong number of values");
    for (size_t i = 0; i < expected.values.size(); ++i) {
        float v = 0;
        std::string_view t = data->array[i].number;
        auto r = std::from_chars(t.data(), t.data() + t.size(), v);
        if (r.ec != std::errc() || std::memcmp(&v, &expected.values[i], 4) != 0)
            return fail_at(i, v, expected.values[i]);
    }
    std::printf("%s: %zu values equal braid-run's (JSON)\n", name.c_str(), expected.values.size());
    return 0;
}

int check_binary(const std::string& response, size_t json_length, const std::string& name,
                 const std::string& npy) {
    std::string bytes = read_file(response);
    if (json_length > bytes.size()) throw std::runtime_error("JSON length past the body");
    std::string_view json(bytes.data(), json_length);
    Json doc = parse_json(json);
    Npy expected = read_npy(npy);
    // Binary outputs follow the JSON part in the order of "outputs".
    size_t offset = json_length;
    for (const Json& o : doc.find("outputs")->array) {
        const Json* size =
            o.find("parameters") ? o.find("parameters")->find("binary_data_size") : nullptr;
        if (!size) throw std::runtime_error("an output without binary_data_size");
        size_t n = std::stoull(std::string(size->number));
        if (o.find("name")->string == name) {
            check_shape(o, expected);
            if (n != expected.values.size() * 4 || offset + n > bytes.size())
                throw std::runtime_error("binary_data_size " + std::to_string(n) + ", expected " +
                                         std::to_string(expected.values.size() * 4));
            const float* seen = reinterpret_cast<const float*>(bytes.data() + offset);
            for (size_t i = 0; i < expected.values.size(); ++i) {
                float v;
                std::memcpy(&v, seen + i, 4);
                if (std::memcmp(&v, &expected.values[i], 4) != 0)
                    return fail_at(i, v, expected.values[i]);
            }
            std::printf("%s: %zu values equal braid-run's (binary)\n", name.c_str(),
                        expected.values.size());
            return 0;
        }
        offset += n;
    }
    throw std::runtime_error("response has no output " + name);
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> a(argv + 1, argv + argc);
    try {
        if (a.size() == 5 && a[0] == "make-input")
            return make_input(a[1], a[2], a[3], unsigned(std::stoul(a[4])));
        if (a.size() == 4 && a[0] == "check-json") return check_json(a[1], a[2], a[3]);
        if (a.size() == 5 && a[0] == "check-binary")
            return check_binary(a[1], std::stoull(a[2]), a[3], a[4]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "serve_test_data: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: see the comment at the top of serve_test_data.cpp\n");
    return 2;
}
