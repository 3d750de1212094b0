// bench_json: braid-serve's request parser (serve/json.cpp with the protocol's checks,
// serve/protocol.cpp) against simdjson's On-Demand parser doing the least the server would do
// with the same body: find the input, read its name, datatype and shape, and read every value of
// its "data" array into a float32 buffer. Same bodies, same run.
//
//   cases: a batch-1 request of the example mlp ([1,784] FP32) and a large one ([256,4096]).
//
// One JSON line per case:
//   {"bench":"json","case":...,"bytes":...,"braid_mb_s":...,"simdjson_mb_s":...,"ratio":...}
// ratio = braid / simdjson (above 1: braid's parser is faster).
//
//     bench_json [--min-seconds S]
#include "bench_cli.h"
#include "serve/protocol.h"

#include <simdjson.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

//! An infer request body with one FP32 input of `shape`, values as a client prints them.
std::string make_body(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.f, 1.f);
    std::string body = R"({"id":"bench","inputs":[{"name":"x","datatype":"FP32","shape":)";
    body += braid::serve::shape_text(shape);
    body += R"(,"data":[)";
    char buf[32];
    for (size_t i = 0; i < n; ++i) {
        if (i) body += ',';
        auto r = std::to_chars(buf, buf + sizeof buf, dist(rng));
        body.append(buf, r.ptr);
    }
    body += "]}]}";
    return body;
}

//! What simdjson On-Demand does for the same request: the fields the server checks and every
//! value into float32 (the text's shortest float, as the server converts it).
float simdjson_parse(simdjson::ondemand::parser& parser, const simdjson::padded_string& body,
                     std::vector<float>& values) {
    auto doc = parser.iterate(body);
    float sum = 0;
    for (auto input : doc["inputs"].get_array()) {
        std::string_view name = input["name"].get_string();
        std::string_view datatype = input["datatype"].get_string();
        if (name != "x" || datatype != "FP32") throw std::runtime_error("unexpected input");
        size_t n = 1;
        for (auto d : input["shape"].get_array()) n *= size_t(int64_t(d.get_int64()));
        values.resize(n);
        size_t i = 0;
        for (auto v : input["data"].get_array()) {
            std::string_view text = v.raw_json_token();
            float f = 0;
            std::from_chars(text.data(), text.data() + text.size(), f);
            if (i < n) values[i] = f;
            ++i;
        }
        if (i != n) throw std::runtime_error("value count differs from the shape");
        sum += values[0];
    }
    return sum;
}

//! Runs `fn` repeatedly for at least `min_seconds`; bytes/s in MB/s.
template <typename Fn> double throughput(size_t bytes, double min_seconds, Fn&& fn) {
    fn(); // warm-up
    size_t runs = 0;
    auto start = Clock::now();
    double elapsed = 0;
    do {
        fn();
        ++runs;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_seconds);
    return double(bytes) * double(runs) / elapsed / 1e6;
}

} // namespace

int main(int argc, char** argv) {
    double min_seconds = 1.0;
    CLI::App app{"braid-serve's JSON request parser against simdjson On-Demand"};
    app.add_option("--min-seconds", min_seconds, "Timed seconds per parser and case")
        ->capture_default_str();
    if (auto rc = braid::bench::parse_command_line(app, argc, argv)) return *rc;

    struct Case {
        const char* name;
        std::vector<int64_t> shape;
    };
    for (const Case& c : {Case{"mlp_batch1", {1, 784}}, Case{"large", {256, 4096}}}) {
        std::string body = make_body(c.shape);
        braid::serve::ModelSignature sig;
        sig.name = "bench";
        sig.inputs.push_back({"x", braid::embed::DType::FLOAT32, c.shape});
        float sink = 0;
        double braid_mb_s = throughput(body.size(), min_seconds, [&] {
            auto req = braid::serve::decode_infer_request(body, -1, sig);
            sink += static_cast<const float*>(req.inputs[0].data())[0];
        });
        simdjson::ondemand::parser parser;
        simdjson::padded_string padded(body);
        std::vector<float> values;
        double simd_mb_s = throughput(body.size(), min_seconds, [&] {
            // The copy into padded memory is part of the cost: the server's body is a
            // std::string without simdjson's padding.
            simdjson::padded_string fresh(body);
            sink += simdjson_parse(parser, fresh, values);
        });
        // Both read the same values.
        auto req = braid::serve::decode_infer_request(body, -1, sig);
        simdjson_parse(parser, padded, values);
        bool same = std::equal(values.begin(), values.end(),
                               static_cast<const float*>(req.inputs[0].data()));
        std::printf("{\"bench\":\"json\",\"case\":\"%s\",\"bytes\":%zu,\"braid_mb_s\":%.1f,"
                    "\"simdjson_mb_s\":%.1f,\"ratio\":%.3f,\"same_values\":%s,\"sink\":%g}\n",
                    c.name, body.size(), braid_mb_s, simd_mb_s, braid_mb_s / simd_mb_s,
                    same ? "true" : "false", double(sink));
        if (!same) return 1;
    }
    return 0;
}
