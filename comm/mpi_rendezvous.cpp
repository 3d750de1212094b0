#include "comm/mpi_rendezvous.h"

#include "base/error.h"
#include "comm/mpi_communicator.h"
#include "comm/rendezvous_server.h"
#include "comm/tcp_client.h"

#include <mpi.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <random>

namespace braid::comm {
namespace {

//! What rank 0 broadcasts: where its server listens and the token it expects.
struct ServerAddress {
    std::array<char, 256> host{};
    std::array<char, 64> token{};
    int32_t port = 0;
};

std::string host_name() {
    std::array<char, 256> name{};
    if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
    return name.data();
}

std::string random_token() {
    std::random_device device;
    std::string token;
    for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", device());
    return token;
}

} // namespace

MpiRendezvous::MpiRendezvous() {
    m_rank = mpi_world_rank();
    m_size = mpi_world_size();
    ServerAddress address;
    if (m_rank == 0) {
        ServerOptions options;
        // Ranks may sit on other machines: listen everywhere, but only for holders of a
        // token that exists in this job alone.
        options.host = m_size > 1 ? "0.0.0.0" : "127.0.0.1";
        options.token = random_token();
        m_server = std::make_unique<RendezvousServer>(options);
        address.port = m_server->start();
        std::snprintf(address.host.data(), address.host.size(), "%s", host_name().c_str());
        std::snprintf(address.token.data(), address.token.size(), "%s", options.token.c_str());
    }
    BRAID_MPI_CHECK(MPI_Bcast(&address, sizeof(address), MPI_BYTE, 0, MPI_COMM_WORLD));
    // On rank 0's machine the loopback address always works; elsewhere its host name.
    std::string host = host_name() == address.host.data() ? "127.0.0.1" : address.host.data();
    TcpClientOptions options;
    options.token = address.token.data();
    m_client = std::make_shared<TcpGroupClient>(host, uint16_t(address.port), options);
}

MpiRendezvous::~MpiRendezvous() {
    m_client.reset();
    if (m_server) m_server->stop();
}

} // namespace braid::comm
