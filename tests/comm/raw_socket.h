// A plain blocking loopback socket for the rendezvous server tests: sends what no real client
// would (garbage, oversized or unfinished frames) and reads single reply frames.
#pragma once

#include "comm/frame.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace braid::comm::test {

//! A blocking socket to 127.0.0.1:port; reads give up after 5 s.
class RawSocket {
public:
    explicit RawSocket(uint16_t port) {
        m_fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        timeval tv{5, 0};
        ::setsockopt(m_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ::setsockopt(m_fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        EXPECT_EQ(::connect(m_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    }
    ~RawSocket() { close(); }
    RawSocket(const RawSocket&) = delete;
    RawSocket& operator=(const RawSocket&) = delete;

    void close() {
        if (m_fd >= 0) ::close(m_fd);
        m_fd = -1;
    }
    //! Writes all of `data`; a test failure when the server does not take it.
    void write(const void* data, size_t size) { ASSERT_TRUE(try_write(data, size)); }
    void write(const std::vector<uint8_t>& bytes) { write(bytes.data(), bytes.size()); }
    //! Writes all of `data`; false when the server closed the connection (or stalled 5 s).
    bool try_write(const void* data, size_t size) {
        auto* p = static_cast<const uint8_t*>(data);
        while (size) {
            ssize_t n = ::send(m_fd, p, size, MSG_NOSIGNAL);
            if (n <= 0) return false;
            p += n;
            size -= size_t(n);
        }
        return true;
    }
    //! Writes a frame header announcing a payload of `length` bytes.
    void write_header(uint32_t length) {
        std::vector<uint8_t> header = {'B',
                                       'R',
                                       'D',
                                       'Z',
                                       uint8_t(length),
                                       uint8_t(length >> 8),
                                       uint8_t(length >> 16),
                                       uint8_t(length >> 24)};
        write(header);
    }
    //! Reads one frame; returns its ErrorReply message, or "<eof>" / "<not an error>".
    std::string read_error() {
        uint8_t header[FRAME_HEADER_SIZE];
        if (!read_exact(header, sizeof(header))) return "<eof>";
        std::string error;
        uint32_t length = parse_frame_header(header, error);
        if (!length) return "<bad header: " + error + ">";
        std::vector<uint8_t> payload(length);
        if (!read_exact(payload.data(), length)) return "<eof>";
        auto* frame = verify_frame(payload.data(), length);
        if (!frame || frame->body_type() != fb::Body::ErrorReply) return "<not an error>";
        return frame->body_as_ErrorReply()->message()->str();
    }
    //! True when the server closed the connection (read returns 0 or the connection was reset).
    bool closed_by_peer() {
        char c;
        ssize_t n = ::recv(m_fd, &c, 1, 0);
        return n == 0 || (n < 0 && errno == ECONNRESET);
    }

private:
    bool read_exact(uint8_t* out, size_t size) {
        while (size) {
            ssize_t n = ::recv(m_fd, out, size, 0);
            if (n <= 0) return false;
            out += n;
            size -= size_t(n);
        }
        return true;
    }
    int m_fd = -1;
};

//! A HelloRequest frame (proves the token; answered with OkReply).
inline std::vector<uint8_t> hello_frame(uint64_t request_id = 1, std::string_view token = "") {
    flatbuffers::FlatBufferBuilder builder(64);
    auto body = fb::CreateHelloRequest(builder);
    return make_frame(builder, FrameMeta{request_id, token, 0, 0, PROTOCOL_VERSION},
                      fb::Body::HelloRequest, body.Union());
}

} // namespace braid::comm::test
