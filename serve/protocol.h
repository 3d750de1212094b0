// The Open Inference Protocol (KServe v2) messages of braid-serve: datatypes, an inference
// request decoded from JSON (optionally followed by binary tensor data, the binary-tensor
// extension) and checked against the model's signature, and the response encoded back.
// Pure functions of their arguments: thread-safe.
#pragma once

#include <braid/embed.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace braid::serve {

//! A request the server rejects: `status` is the HTTP status that fits the cause.
class RequestError : public std::runtime_error {
public:
    RequestError(int status, const std::string& message)
        : std::runtime_error(message), m_status(status) {}
    int status() const { return m_status; }

private:
    int m_status;
};

//! The protocol's datatype name of a braid dtype ("FP32").
const char* datatype_name(embed::DType dtype);
//! The braid dtype of a protocol datatype name; false when braid has none.
bool datatype_from_name(std::string_view name, embed::DType& dtype);

//! "[1,784]"
std::string shape_text(const std::vector<int64_t>& shape);

//! A tensor owned by the server: dense, row-major, 8-byte aligned.
struct HostTensor {
    std::string name;
    embed::DType dtype = embed::DType::FLOAT32;
    std::vector<int64_t> shape;
    std::vector<uint64_t> storage; //!< 8-byte aligned bytes
    size_t bytes = 0;

    void allocate(size_t nr_bytes) {
        bytes = nr_bytes;
        storage.assign((nr_bytes + 7) / 8, 0);
    }
    void* data() { return storage.data(); }
    const void* data() const { return storage.data(); }
};

//! An output the client asked for, and whether it wants it as binary data.
struct RequestedOutput {
    std::string name;
    bool binary = false;
};

//! A decoded inference request, its inputs in the model's input order.
struct InferRequest {
    std::string id;                       //!< the request's "id", echoed back ("" if none)
    std::vector<HostTensor> inputs;       //!< one per model input, in the model's order
    std::vector<RequestedOutput> outputs; //!< empty: every output
    bool binary_outputs = false;          //!< parameters.binary_data_output
    int64_t timeout_us = -1;              //!< parameters.timeout (µs), -1 when not given
};

//! The signature a request is checked against.
struct ModelSignature {
    std::string name;
    std::vector<embed::TensorInfo> inputs;
    std::vector<embed::TensorInfo> outputs;
};

/*!
 * Decodes the body of POST /v2/models/{name}/infer. `json_length` is the value of the
 * Inference-Header-Content-Length header (the JSON part's length, the binary tensor data
 * following it), or -1 when the header is absent (the whole body is JSON). Throws RequestError
 * (400) naming the model, request id, input and the values seen versus expected.
 */
InferRequest decode_infer_request(std::string_view body, int64_t json_length,
                                  const ModelSignature& model);

//! One output's values: braid's or the server's memory, valid while encoding.
struct OutputData {
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t bytes = 0;
};

/*!
 * Encodes the response to `request` into `body`: the outputs it asked for, in its order (every
 * output of `model`, in the model's order, when it named none), each as JSON or binary data as
 * it asked. `output(k)` gives the values of the model's output k. Returns the length of the
 * JSON part when any output is binary (the value of Inference-Header-Content-Length), else -1.
 */
int64_t encode_infer_response(std::string& body, const ModelSignature& model,
                              const InferRequest& request,
                              const std::function<OutputData(size_t)>& output);

//! {"error": message}
std::string error_body(std::string_view message);

} // namespace braid::serve
