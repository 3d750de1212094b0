// Reading model bytes: mapping a file, the checks that run before anything is trusted, and
// the structure of a verified model.
#include "base/hash.h"
#include "collective/registry.h"
#include "serialization/format.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace braid::serial {

namespace {

//! Bytes of the root offset and the file identifier at a flatbuffer's start.
constexpr size_t PREFIX_BYTES = 8;

std::string printable(const uint8_t* p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i)
        s += (p[i] >= 0x20 && p[i] < 0x7f) ? std::string(1, char(p[i]))
                                           : fmt::format("\\x{:02x}", p[i]);
    return s;
}

} // namespace

ModelBytes map_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) BRAID_THROW(SerializationError, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        BRAID_THROW(SerializationError, "{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        BRAID_THROW(SerializationError, "{}: not a regular file", path);
    }
    if (st.st_size == 0) {
        ::close(fd);
        BRAID_THROW(SerializationError, "{}: empty file (0 bytes): not a braid model", path);
    }
    size_t size = size_t(st.st_size);
    // Private and writable: tensors used in place may be updated (SharedParam), which copies
    // the touched pages and never writes the file.
    void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (addr == MAP_FAILED)
        BRAID_THROW(SerializationError, "{}: cannot map {} bytes: {}", path, size,
                    std::strerror(err));
    ModelBytes bytes;
    bytes.data = static_cast<const uint8_t*>(addr);
    bytes.size = size;
    bytes.keep_alive = std::shared_ptr<void>(addr, [size](void* p) { ::munmap(p, size); });
    bytes.mapped = true;
    bytes.source = path;
    return bytes;
}

ModelBytes copy_buffer(std::span<const uint8_t> buffer) {
    ModelBytes bytes;
    bytes.source = "<buffer>";
    bytes.size = buffer.size();
    if (buffer.empty()) {
        bytes.data = nullptr;
        return bytes;
    }
    size_t alloc =
        (buffer.size() + MODEL_DATA_ALIGNMENT - 1) / MODEL_DATA_ALIGNMENT * MODEL_DATA_ALIGNMENT;
    void* p = std::aligned_alloc(MODEL_DATA_ALIGNMENT, alloc);
    if (!p) throw std::bad_alloc();
    std::memcpy(p, buffer.data(), buffer.size());
    bytes.data = static_cast<const uint8_t*>(p);
    bytes.keep_alive = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    return bytes;
}

uint64_t model_checksum(const uint8_t* data, size_t size, size_t checksum_at) {
    static const uint8_t zeros[8] = {};
    Hasher h;
    h.add_bytes(data, checksum_at);
    h.add_bytes(zeros, 8);
    h.add_bytes(data + checksum_at + 8, size - checksum_at - 8);
    return h.digest();
}

size_t checksum_field_offset(const uint8_t* data) {
    auto* table =
        reinterpret_cast<const flatbuffers::Table*>(flatbuffers::GetRoot<fbs::ModelHeader>(data));
    const uint8_t* field = table->GetAddressOf(fbs::ModelHeader::VT_CHECKSUM);
    return field ? size_t(field - data) : SIZE_MAX;
}

const fbs::Model* check_model(const ModelBytes& bytes, bool verify_integrity) {
    const std::string& src = bytes.source;
    const uint8_t* data = bytes.data;
    size_t size = bytes.size;
    if (size == 0)
        BRAID_THROW(SerializationError, "{}: empty file (0 bytes): not a braid model", src);
    if (size < PREFIX_BYTES)
        BRAID_THROW(SerializationError, "{}: truncated: {} bytes is too short for a braid model",
                    src, size);
    if (!fbs::ModelBufferHasIdentifier(data))
        BRAID_THROW(SerializationError,
                    "{}: wrong file identifier \"{}\" (expected \"{}\"): not a braid model", src,
                    printable(data + 4, 4), fbs::ModelIdentifier());
    // The header first: it must be readable even when the rest is from a newer format.
    {
        flatbuffers::Verifier v(data, std::min<size_t>(size, FLATBUFFERS_MAX_BUFFER_SIZE - 1));
        if (!v.VerifyBuffer<fbs::ModelHeader>(fbs::ModelIdentifier()))
            BRAID_THROW(SerializationError,
                        "{}: truncated or corrupt: the model header does not verify ({} bytes)",
                        src, size);
    }
    auto* header = flatbuffers::GetRoot<fbs::ModelHeader>(data);
    uint16_t major = header->format_major(), minor = header->format_minor();
    if (major > MODEL_FORMAT_MAJOR)
        BRAID_THROW(SerializationError,
                    "{}: format version {}.{} is newer than this build reads ({}.x); load it with "
                    "a newer braid",
                    src, major, minor, MODEL_FORMAT_MAJOR);
    if (major < MODEL_FORMAT_MAJOR)
        BRAID_THROW(SerializationError,
                    "{}: format version {}.{} is older than this build reads ({}.x)", src, major,
                    minor, MODEL_FORMAT_MAJOR);
    uint64_t file_size = header->file_size(), data_offset = header->data_offset();
    if (verify_integrity) {
        if (size < file_size)
            BRAID_THROW(SerializationError,
                        "{}: truncated: the file has {} bytes, its header says {}", src, size,
                        file_size);
        if (size > file_size)
            BRAID_THROW(SerializationError,
                        "{}: corrupt: {} unexpected bytes after the model's end (the header says "
                        "{} bytes)",
                        src, size - file_size, file_size);
        size_t at = checksum_field_offset(data);
        if (at == SIZE_MAX || at + 8 > size)
            BRAID_THROW(SerializationError, "{}: corrupt: the model header has no checksum", src);
        uint64_t stored = header->checksum(), computed = model_checksum(data, size, at);
        if (stored != computed)
            BRAID_THROW(SerializationError,
                        "{}: checksum mismatch (stored {:016x}, computed {:016x}): the file is "
                        "corrupt or was modified",
                        src, stored, computed);
    }
    if (data_offset < PREFIX_BYTES || data_offset > size || data_offset % MODEL_DATA_ALIGNMENT)
        BRAID_THROW(SerializationError,
                    "{}: corrupt: data section offset {} is invalid (file of {} bytes; it must be "
                    "a multiple of {})",
                    src, data_offset, size, MODEL_DATA_ALIGNMENT);
    if (data_offset >= FLATBUFFERS_MAX_BUFFER_SIZE)
        BRAID_THROW(SerializationError, "{}: corrupt: the model structure is over 2 GiB", src);
    // The structure: every table, vector and string lies inside [0, data_offset).
    flatbuffers::Verifier v(data, size_t(data_offset), /*max_depth=*/64, /*max_tables=*/10000000);
    if (!fbs::VerifyModelBuffer(v))
        BRAID_THROW(SerializationError, "{}: corrupt: the model structure does not verify", src);
    return fbs::GetModel(data);
}

DType dtype_from_file(uint8_t value, const std::string& what) {
    if (value > uint8_t(DTypeEnum::UINT64))
        BRAID_THROW(SerializationError, "{}: invalid dtype code {}", what, value);
    return DType(DTypeEnum(value));
}

std::vector<long> dims_from_file(const flatbuffers::Vector<int64_t>* dims, bool allow_open,
                                 const std::string& what) {
    std::vector<long> res;
    if (!dims) return res;
    check_aligned(dims, what);
    if (dims->size() > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError, "{}: {} dims (at most {})", what, dims->size(),
                    TensorShape::MAX_NDIM);
    for (int64_t d : *dims) {
        if (d < (allow_open ? -1 : 0))
            BRAID_THROW(SerializationError, "{}: invalid dim {}", what, d);
        res.push_back(long(d));
    }
    return res;
}

TensorShape shape_from_file(const flatbuffers::Vector<int64_t>* dims, DType dtype,
                            const std::string& what) {
    auto d = dims_from_file(dims, false, what);
    TensorShape s;
    s.set_ndim(d.size());
    for (size_t i = 0; i < d.size(); ++i) s[i] = size_t(d[i]);
    if (!s.packed_bytes(dtype))
        BRAID_THROW(SerializationError, "{}: shape {} of {} is too large: more than 2^56 bytes",
                    what, s.to_string(), dtype.name());
    return s;
}

namespace {

std::string param_display(const fbs::Param* p) {
    auto list = [](auto* v) {
        std::string s = "[";
        if (v)
            for (size_t i = 0; i < v->size(); ++i)
                s += (i ? ", " : "") + fmt::format("{}", v->Get(flatbuffers::uoffset_t(i)));
        return s + "]";
    };
    switch (p->kind()) {
    case fbs::ParamKind::INT:
        return std::to_string(p->int_value());
    case fbs::ParamKind::FLOAT:
        return fmt::format("{}", p->float_value());
    case fbs::ParamKind::BOOL:
        return p->int_value() ? "true" : "false";
    case fbs::ParamKind::STRING:
        return str(p->string_value());
    case fbs::ParamKind::INT_LIST:
        return list(p->int_list());
    case fbs::ParamKind::FLOAT_LIST:
        return list(p->float_list());
    case fbs::ParamKind::TENSOR:
        return fmt::format("tensor #{}", p->tensor());
    }
    return fmt::format("<param kind {}>", uint8_t(p->kind()));
}

ModelIO io_from_file(const fbs::TensorIO* io, size_t nr_vars, bool is_input,
                     const std::string& src) {
    std::string what =
        fmt::format("{}: {} \"{}\"", src, is_input ? "input" : "output", str(io->name()));
    if (!io->name() || io->name()->size() == 0)
        BRAID_THROW(SerializationError, "{}: corrupt: an {} has no name", src,
                    is_input ? "input" : "output");
    if (io->var() >= nr_vars)
        BRAID_THROW(SerializationError, "{}: corrupt: var index {} out of range ({} vars)", what,
                    io->var(), nr_vars);
    ModelIO res;
    res.name = io->name()->str();
    res.dtype = dtype_from_file(uint8_t(io->dtype()), what);
    res.shape = dims_from_file(io->shape(), true, what);
    if (io->default_shape()) {
        res.default_shape = shape_from_file(io->default_shape(), res.dtype, what);
    } else {
        // Older writers, or outputs: the recorded shape with open dims as 1.
        res.default_shape.set_ndim(res.shape.size());
        for (size_t i = 0; i < res.shape.size(); ++i)
            res.default_shape[i] = res.shape[i] < 0 ? 1 : size_t(res.shape[i]);
        if (!res.default_shape.packed_bytes(res.dtype))
            BRAID_THROW(SerializationError, "{}: shape {} of {} is too large: more than 2^56 bytes",
                        what, res.shape_string(), res.dtype.name());
    }
    if (!res.accepts(res.default_shape))
        BRAID_THROW(SerializationError, "{}: corrupt: default shape {} does not fit shape {}", what,
                    res.default_shape.to_string(), res.shape_string());
    return res;
}

} // namespace

ModelDescription describe_verified(const ModelBytes& bytes, const fbs::Model* model) {
    const std::string& src = bytes.source;
    ModelDescription d;
    auto& info = d.info;
    info.format_major = model->format_major();
    info.format_minor = model->format_minor();
    info.producer = str(model->producer());
    if (model->metadata())
        for (auto* kv : *model->metadata())
            info.metadata.emplace_back(str(kv->key()), str(kv->value()));
    info.file_size = bytes.size;
    info.checksum = model->checksum();

    size_t nr_vars = model->vars() ? model->vars()->size() : 0;
    if (model->vars())
        for (size_t i = 0; i < nr_vars; ++i) {
            auto* v = model->vars()->Get(flatbuffers::uoffset_t(i));
            std::string what = fmt::format("{}: var #{} \"{}\"", src, i, str(v->name()));
            ModelVar mv;
            mv.name = str(v->name());
            mv.dtype = dtype_from_file(uint8_t(v->dtype()), what);
            mv.shape_known = v->shape_known();
            if (mv.shape_known) mv.shape = shape_from_file(v->shape(), mv.dtype, what);
            d.vars.push_back(std::move(mv));
        }

    uint64_t data_size = bytes.size - model->data_offset();
    if (model->tensors())
        for (size_t i = 0; i < model->tensors()->size(); ++i) {
            auto* t = model->tensors()->Get(flatbuffers::uoffset_t(i));
            std::string what = fmt::format("{}: parameter tensor #{}", src, i);
            ModelTensor mt;
            mt.dtype = dtype_from_file(uint8_t(t->dtype()), what);
            mt.shape = shape_from_file(t->shape(), mt.dtype, what);
            mt.offset = t->offset();
            mt.size = t->size();
            mt.content_hash = t->content_hash();
            size_t need = mt.shape.nr_bytes(mt.dtype); // in bounds: shape_from_file checked
            if (need != mt.size)
                BRAID_THROW(SerializationError,
                            "{}: corrupt: {} {} needs {} bytes, the file records {}", what,
                            mt.dtype.name(), mt.shape.to_string(), need, mt.size);
            if (mt.offset % MODEL_DATA_ALIGNMENT)
                BRAID_THROW(SerializationError, "{}: corrupt: offset {} is not {}-byte aligned",
                            what, mt.offset, MODEL_DATA_ALIGNMENT);
            if (mt.offset > data_size || mt.size > data_size - mt.offset)
                BRAID_THROW(SerializationError,
                            "{}: truncated or corrupt: bytes [{}, {}) lie past the data section's "
                            "end ({} bytes)",
                            what, mt.offset, mt.offset + mt.size, data_size);
            info.tensor_bytes += mt.size;
            d.tensors.push_back(mt);
        }
    info.nr_tensors = d.tensors.size();
    info.nr_vars = nr_vars;

    if (model->operators())
        for (size_t i = 0; i < model->operators()->size(); ++i) {
            auto* o = model->operators()->Get(flatbuffers::uoffset_t(i));
            ModelOperator mo;
            mo.type_name = str(o->type_name());
            mo.name = str(o->name());
            mo.comp_node = str(o->comp_node());
            mo.version = o->version();
            std::string what =
                fmt::format("{}: operator #{} {} \"{}\"", src, i, mo.type_name, mo.name);
            if (mo.type_name.empty())
                BRAID_THROW(SerializationError, "{}: corrupt: no type name", what);
            if (o->type_id() != operator_type_id(mo.type_name))
                BRAID_THROW(SerializationError,
                            "{}: corrupt: type id {:016x} does not match the type name", what,
                            o->type_id());
            auto indices = [&](auto* v, const char* kind) {
                std::vector<uint32_t> res;
                if (v)
                    for (uint32_t k : *v) {
                        if (k >= nr_vars)
                            BRAID_THROW(SerializationError,
                                        "{}: corrupt: {} var index {} out of range ({} vars)", what,
                                        kind, k, nr_vars);
                        res.push_back(k);
                    }
                return res;
            };
            mo.inputs = indices(o->inputs(), "input");
            mo.outputs = indices(o->outputs(), "output");
            if (o->params())
                for (auto* p : *o->params()) {
                    check_aligned(p->int_list(), what);
                    check_aligned(p->float_list(), what);
                    if (p->kind() == fbs::ParamKind::TENSOR && p->tensor() >= d.tensors.size())
                        BRAID_THROW(SerializationError,
                                    "{}: corrupt: param \"{}\" refers to tensor #{} ({} stored)",
                                    what, str(p->name()), p->tensor(), d.tensors.size());
                    mo.params.emplace_back(str(p->name()), param_display(p));
                }
            d.operators.push_back(std::move(mo));
        }
    info.nr_operators = d.operators.size();

    if (model->inputs())
        for (auto* io : *model->inputs()) d.inputs.push_back(io_from_file(io, nr_vars, true, src));
    if (model->outputs())
        for (auto* io : *model->outputs())
            d.outputs.push_back(io_from_file(io, nr_vars, false, src));
    return d;
}

} // namespace braid::serial

namespace braid {

ModelDescription describe_model(const std::string& path) {
    auto bytes = serial::map_file(path);
    return serial::describe_verified(bytes, serial::check_model(bytes, true));
}

ModelDescription describe_model(std::span<const uint8_t> buffer) {
    auto bytes = serial::copy_buffer(buffer);
    return serial::describe_verified(bytes, serial::check_model(bytes, true));
}

} // namespace braid
