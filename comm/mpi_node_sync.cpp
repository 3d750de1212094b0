#include "comm/mpi_node_sync.h"

#include "base/error.h"
#include "base/log.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BRAID_CPU_RELAX() _mm_pause()
#else
#define BRAID_CPU_RELAX() std::this_thread::yield()
#endif

namespace braid::comm {

namespace {

//! Each word on its own cache line: ranks spin on them.
constexpr size_t LINE = 64;
//! Bits of the decision word below the sequence number: 0 = GO, r + 1 = ABORT by rank r.
constexpr unsigned STATE_BITS = 20;

uint64_t load(const uint64_t* word) {
    return __atomic_load_n(word, __ATOMIC_SEQ_CST);
}

} // namespace

std::unique_ptr<MpiNodeSync> MpiNodeSync::create(MPI_Comm comm, uint64_t hash, uint32_t nranks,
                                                 uint32_t rank) {
    if (nranks >= (1u << STATE_BITS) - 1) return nullptr;
    // One machine? Every member computes the same answer: its machine holds all or not.
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, int(rank), MPI_INFO_NULL, &node) !=
        MPI_SUCCESS)
        return nullptr;
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    if (uint32_t(node_size) != nranks) return nullptr;

    std::string name = fmt::format("/braid-mpi-{:016x}", hash);
    size_t size = LINE * (1 + nranks);
    int ok = 1;
    int fd = -1;
    if (rank == 0) {
        shm_unlink(name.c_str()); // a stale segment of a crashed run
        fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, off_t(size)) != 0) ok = 0;
    }
    MPI_Barrier(comm);
    if (rank != 0) {
        fd = shm_open(name.c_str(), O_RDWR, 0600);
        if (fd < 0) ok = 0;
    }
    void* base = MAP_FAILED;
    if (fd >= 0) {
        base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (base == MAP_FAILED) ok = 0;
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
    if (rank == 0) shm_unlink(name.c_str()); // the mappings stay valid
    if (!all_ok) {
        if (base != MAP_FAILED) munmap(base, size);
        logger()->info("mpi: no shared-memory handshake for group {:016x} ({}); collectives "
                       "use nonblocking MPI calls",
                       hash, std::strerror(errno));
        return nullptr;
    }
    return std::unique_ptr<MpiNodeSync>(
        new MpiNodeSync(static_cast<uint8_t*>(base), size, nranks, rank));
}

MpiNodeSync::~MpiNodeSync() {
    munmap(m_base, m_size);
}

uint64_t* MpiNodeSync::decision() const {
    return reinterpret_cast<uint64_t*>(m_base);
}

uint64_t* MpiNodeSync::counter(uint32_t rank) const {
    return reinterpret_cast<uint64_t*>(m_base + LINE * (1 + rank));
}

bool MpiNodeSync::decide(uint64_t sequence, uint64_t state) {
    uint64_t expected = load(decision());
    uint64_t desired = sequence << STATE_BITS | state;
    while ((expected >> STATE_BITS) < sequence)
        if (__atomic_compare_exchange_n(decision(), &expected, desired, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return true;
    return false;
}

void MpiNodeSync::enter(uint64_t sequence, const Deadline& deadline,
                        const std::function<std::string()>& what) {
    __atomic_store_n(counter(m_rank), sequence, __ATOMIC_SEQ_CST);
    for (uint64_t polls = 0;; ++polls) {
        uint64_t d = load(decision());
        // A later call was decided: this one was GO (an ABORT ends the group's calls).
        if ((d >> STATE_BITS) > sequence) return;
        if ((d >> STATE_BITS) == sequence) {
            uint64_t state = d & ((uint64_t(1) << STATE_BITS) - 1);
            if (state == 0) return;
            BRAID_THROW(CommError,
                        "{}: rank {} gave up waiting for its peers; nobody entered "
                        "the MPI call",
                        what(), state - 1);
        }
        bool all_arrived = true;
        for (uint32_t r = 0; r < m_nranks && all_arrived; ++r)
            all_arrived = load(counter(r)) >= sequence;
        // Winning the CAS decides GO; losing it means someone decided first (GO or ABORT),
        // which the next turn reads.
        if (all_arrived) {
            if (decide(sequence, 0)) return;
            continue;
        }
        if ((polls & 255) == 255) {
            if (deadline.passed()) {
                std::string missing;
                uint32_t arrived = 0;
                for (uint32_t r = 0; r < m_nranks; ++r) {
                    if (load(counter(r)) >= sequence)
                        ++arrived;
                    else
                        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
                }
                if (decide(sequence, m_rank + 1))
                    throw TimeoutError(fmt::format("{} timed out after {}: {} of {} ranks "
                                                   "arrived; missing ranks: {}",
                                                   what(), format_duration(deadline.span()),
                                                   arrived, m_nranks, missing));
                continue; // GO was decided just before: go on with the others
            }
            // Ranks may outnumber cores: let the late ones run.
            if (polls > 4096) std::this_thread::yield();
        }
        BRAID_CPU_RELAX();
    }
}

} // namespace braid::comm
