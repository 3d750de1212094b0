// How processes launched by mpirun find a group manager: rank 0 of MPI_COMM_WORLD starts a
// RendezvousServer in-process and tells every other rank where it listens (host, port and a
// random token) with one MPI broadcast; every rank then talks to it through a TcpGroupClient.
// Examples, tests and `braid-run --backend mpi` use this so that nobody has to start a
// braid-rendezvous next to mpirun.
#pragma once

#include "comm/group_client.h"

#include <memory>

namespace braid::comm {

class RendezvousServer;

class MpiRendezvous {
public:
    //! Collective over MPI_COMM_WORLD (initialises MPI): every rank must construct one.
    MpiRendezvous();
    //! Drops the client; rank 0 stops its server. Call after every rank has finished its
    //! collectives (e.g. after an MPI barrier), or peers still waiting lose their server.
    ~MpiRendezvous();
    MpiRendezvous(const MpiRendezvous&) = delete;
    MpiRendezvous& operator=(const MpiRendezvous&) = delete;

    //! The client every group of this process registers through.
    const std::shared_ptr<GroupClient>& client() const { return m_client; }
    int world_rank() const { return m_rank; }
    int world_size() const { return m_size; }

private:
    std::unique_ptr<RendezvousServer> m_server;
    std::shared_ptr<GroupClient> m_client;
    int m_rank = 0, m_size = 1;
};

} // namespace braid::comm
