#include "serialization/npy.h"

#include "base/error.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace braid {

namespace {

constexpr char MAGIC[] = "\x93NUMPY";
constexpr size_t MAGIC_LEN = 6;

struct DescrEntry {
    const char* descr;
    DTypeEnum dtype;
};
// '<' little-endian, '|' not applicable (one byte), '=' native (little on every host braid
// supports).
constexpr DescrEntry DESCRS[] = {
    {"<f4", DTypeEnum::FLOAT32}, {"=f4", DTypeEnum::FLOAT32}, {"<f2", DTypeEnum::FLOAT16},
    {"=f2", DTypeEnum::FLOAT16}, {"|i1", DTypeEnum::INT8},    {"<i1", DTypeEnum::INT8},
    {"=i1", DTypeEnum::INT8},    {"|u1", DTypeEnum::UINT8},   {"<u1", DTypeEnum::UINT8},
    {"=u1", DTypeEnum::UINT8},   {"<i4", DTypeEnum::INT32},   {"=i4", DTypeEnum::INT32},
    {"<i8", DTypeEnum::INT64},   {"=i8", DTypeEnum::INT64},   {"|b1", DTypeEnum::BOOL},
    {"<b1", DTypeEnum::BOOL},    {"=b1", DTypeEnum::BOOL},    {"<f8", DTypeEnum::FLOAT64},
    {"=f8", DTypeEnum::FLOAT64}, {"<i2", DTypeEnum::INT16},   {"=i2", DTypeEnum::INT16},
    {"<u2", DTypeEnum::UINT16},  {"=u2", DTypeEnum::UINT16},  {"<u4", DTypeEnum::UINT32},
    {"=u4", DTypeEnum::UINT32},  {"<u8", DTypeEnum::UINT64},  {"=u8", DTypeEnum::UINT64},
};

//! A tiny parser of the header's Python dict literal: {'descr': '<f4', 'fortran_order':
//! False, 'shape': (2, 3), }
class HeaderParser {
public:
    HeaderParser(std::string_view text, const std::string& source) : m_s(text), m_source(source) {}

    void parse(std::string& descr, bool& fortran, std::vector<size_t>& shape) {
        bool has_descr = false, has_order = false, has_shape = false;
        expect('{');
        for (;;) {
            skip_ws();
            if (peek() == '}') break;
            std::string key = quoted();
            expect(':');
            if (key == "descr") {
                descr = quoted();
                has_descr = true;
            } else if (key == "fortran_order") {
                skip_ws();
                if (m_s.substr(m_pos, 4) == "True") {
                    fortran = true;
                    m_pos += 4;
                } else if (m_s.substr(m_pos, 5) == "False") {
                    fortran = false;
                    m_pos += 5;
                } else {
                    fail("fortran_order is neither True nor False");
                }
                has_order = true;
            } else if (key == "shape") {
                expect('(');
                for (;;) {
                    skip_ws();
                    if (peek() == ')') break;
                    shape.push_back(number());
                    skip_ws();
                    if (peek() == ',') ++m_pos;
                }
                expect(')');
                has_shape = true;
            } else {
                fail("unexpected key '" + key + "'");
            }
            skip_ws();
            if (peek() == ',') ++m_pos;
        }
        if (!has_descr || !has_order || !has_shape)
            fail("the header lacks one of 'descr', 'fortran_order', 'shape'");
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        BRAID_THROW(SerializationError, "{}: malformed .npy header: {}", m_source, what);
    }
    void skip_ws() {
        while (m_pos < m_s.size() && std::isspace(static_cast<unsigned char>(m_s[m_pos]))) ++m_pos;
    }
    char peek() {
        if (m_pos >= m_s.size()) fail("it ends early");
        return m_s[m_pos];
    }
    void expect(char c) {
        skip_ws();
        if (peek() != c) fail(std::string("expected '") + c + "'");
        ++m_pos;
    }
    std::string quoted() {
        skip_ws();
        char q = peek();
        if (q != '\'' && q != '"') fail("expected a quoted string");
        size_t end = m_s.find(q, m_pos + 1);
        if (end == std::string_view::npos) fail("unterminated string");
        std::string res(m_s.substr(m_pos + 1, end - m_pos - 1));
        m_pos = end + 1;
        return res;
    }
    size_t number() {
        size_t v = 0, digits = 0;
        while (m_pos < m_s.size() && std::isdigit(static_cast<unsigned char>(m_s[m_pos]))) {
            if (v > (size_t(1) << 48)) fail("a dimension is too large");
            v = v * 10 + size_t(m_s[m_pos++] - '0');
            ++digits;
        }
        if (!digits) fail("expected a dimension");
        return v;
    }

    std::string_view m_s;
    const std::string& m_source;
    size_t m_pos = 0;
};

} // namespace

std::string npy_descr(DType dtype) {
    switch (dtype.enumv()) {
    case DTypeEnum::FLOAT32:
        return "<f4";
    case DTypeEnum::FLOAT16:
        return "<f2";
    case DTypeEnum::INT8:
        return "|i1";
    case DTypeEnum::UINT8:
        return "|u1";
    case DTypeEnum::INT32:
        return "<i4";
    case DTypeEnum::INT64:
        return "<i8";
    case DTypeEnum::BOOL:
        return "|b1";
    case DTypeEnum::BFLOAT16:
        return "";
    case DTypeEnum::FLOAT64:
        return "<f8";
    case DTypeEnum::INT16:
        return "<i2";
    case DTypeEnum::UINT16:
        return "<u2";
    case DTypeEnum::UINT32:
        return "<u4";
    case DTypeEnum::UINT64:
        return "<u8";
    }
    return "";
}

Tensor parse_npy(std::span<const uint8_t> bytes, const std::string& source) {
    if (bytes.size() < MAGIC_LEN + 4 || std::memcmp(bytes.data(), MAGIC, MAGIC_LEN) != 0)
        BRAID_THROW(SerializationError, "{}: not a .npy file (no \\x93NUMPY magic)", source);
    uint8_t major = bytes[6];
    size_t header_len, header_at;
    if (major == 1) {
        header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8;
        header_at = 10;
    } else if (major == 2 || major == 3) {
        if (bytes.size() < 12) BRAID_THROW(SerializationError, "{}: truncated .npy header", source);
        header_len = size_t(bytes[8]) | size_t(bytes[9]) << 8 | size_t(bytes[10]) << 16 |
                     size_t(bytes[11]) << 24;
        header_at = 12;
    } else {
        BRAID_THROW(SerializationError,
                    "{}: .npy format version {}.{} is not supported (1.0 to "
                    "3.0)",
                    source, major, bytes[7]);
    }
    if (header_len > bytes.size() - header_at)
        BRAID_THROW(SerializationError, "{}: truncated .npy header ({} bytes, file has {})", source,
                    header_len, bytes.size());
    std::string_view header(reinterpret_cast<const char*>(bytes.data() + header_at), header_len);
    std::string descr;
    bool fortran = false;
    std::vector<size_t> dims;
    HeaderParser(header, source).parse(descr, fortran, dims);
    if (fortran)
        BRAID_THROW(SerializationError,
                    "{}: Fortran-order arrays are not supported; save a C-order array "
                    "(numpy.ascontiguousarray)",
                    source);
    const DescrEntry* entry = nullptr;
    for (auto& e : DESCRS)
        if (descr == e.descr) entry = &e;
    if (!entry)
        BRAID_THROW(
            SerializationError,
            "{}: dtype '{}' is not supported (float64, float32, float16, int8, uint8, int32, "
            "int64, bool; little-endian)",
            source, descr);
    if (dims.size() > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError, "{}: {} dims (at most {})", source, dims.size(),
                    TensorShape::MAX_NDIM);
    TensorShape shape(dims);
    DType dtype(entry->dtype);
    size_t data_at = header_at + header_len;
    size_t have = bytes.size() - data_at;
    auto packed = shape.packed_bytes(dtype);
    if (!packed || *packed > have)
        BRAID_THROW(SerializationError, "{}: truncated: {} {} needs {} data bytes, the file has {}",
                    source, dtype.name(), shape.to_string(),
                    packed ? std::to_string(*packed) : std::string("more than 2^56"), have);
    size_t need = *packed;
    if (have > need)
        BRAID_THROW(SerializationError, "{}: {} unexpected bytes after the array's data", source,
                    have - need);
    Tensor t(shape, dtype);
    if (need) std::memcpy(t.raw_ptr(), bytes.data() + data_at, need);
    return t;
}

Tensor read_npy(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) BRAID_THROW(SerializationError, "{}: cannot open: {}", path, std::strerror(errno));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), {});
    if (f.bad()) BRAID_THROW(SerializationError, "{}: read error", path);
    return parse_npy(bytes, path);
}

std::vector<uint8_t> encode_npy(const Tensor& tensor) {
    std::string descr = npy_descr(tensor.dtype());
    if (descr.empty())
        BRAID_THROW(SerializationError, ".npy has no {} dtype; convert the tensor first",
                    tensor.dtype().name());
    if (tensor.device().kind != Device::Kind::CPU)
        BRAID_THROW(SerializationError, "write_npy(): the tensor lives on {}; copy it to the host",
                    tensor.device().to_string());
    auto dims = tensor.shape().dims();
    std::string shape = "(";
    for (size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
    shape += dims.size() == 1 ? ",)" : ")";
    std::string header =
        "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    // Pad with spaces and a newline so the data starts 64-byte aligned.
    size_t prefix = 10;
    size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
    bool v2 = total - prefix > 65535;
    if (v2) {
        prefix = 12;
        total = (prefix + header.size() + 1 + 63) / 64 * 64;
    }
    header.append(total - prefix - header.size() - 1, ' ');
    header += '\n';
    std::vector<uint8_t> out(MAGIC, MAGIC + MAGIC_LEN);
    out.push_back(v2 ? 2 : 1);
    out.push_back(0);
    size_t len = header.size();
    out.push_back(uint8_t(len));
    out.push_back(uint8_t(len >> 8));
    if (v2) {
        out.push_back(uint8_t(len >> 16));
        out.push_back(uint8_t(len >> 24));
    }
    out.insert(out.end(), header.begin(), header.end());
    Tensor c = tensor.contiguous();
    out.insert(out.end(), c.raw_ptr(), c.raw_ptr() + c.nr_bytes());
    return out;
}

void write_npy(const std::string& path, const Tensor& tensor) {
    auto bytes = encode_npy(tensor);
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) BRAID_THROW(SerializationError, "{}: cannot create: {}", path, std::strerror(errno));
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!f) BRAID_THROW(SerializationError, "{}: write error", path);
}

} // namespace braid
