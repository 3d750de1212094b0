#include "comm/mpi_node_sync.h"

#include "base/cpu_relax.h"

#include "base/error.h"
#include "base/log.h"
#include "comm/mpi_communicator.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <thread>

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

std::string describe_arrivals(uint32_t nranks, const std::vector<uint32_t>& missing) {
    std::string text = fmt::format("{} of {} ranks arrived", nranks - missing.size(), nranks);
    if (missing.empty()) return text;
    text += "; missing ranks: ";
    for (size_t i = 0; i < missing.size() && i < 16; ++i)
        text += fmt::format("{}{}", i ? ", " : "", missing[i]);
    if (missing.size() > 16) text += fmt::format(" and {} more", missing.size() - 16);
    return text;
}

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

std::string MpiNodeSync::arrivals(uint64_t sequence) const {
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < m_nranks; ++r)
        if (load(counter(r)) < sequence) missing.push_back(r);
    return describe_arrivals(m_nranks, missing);
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
            // Who had not come is what the rank that gave up saw too, unless a late rank
            // arrived in between (then it is no longer listed).
            BRAID_THROW(CommError,
                        "{}: rank {} gave up waiting for its peers at its deadline; {}; nobody "
                        "entered the MPI call",
                        what(), state - 1, arrivals(sequence));
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
                std::string text = arrivals(sequence);
                if (decide(sequence, m_rank + 1))
                    throw TimeoutError(fmt::format("{} timed out after {}: {}; nobody entered "
                                                   "the MPI call",
                                                   what(), format_duration(deadline.span()), text));
                continue; // GO was decided just before: go on with the others
            }
            // Ranks may outnumber cores: let the late ones run.
            if (polls > 4096) std::this_thread::yield();
        }
        cpu_relax();
    }
}

} // namespace braid::comm

namespace braid::comm {

MpiArrivalExchange::MpiArrivalExchange(MPI_Comm comm, uint32_t nranks, uint32_t rank)
    : m_nranks(nranks), m_rank(rank), m_received(nranks), m_sends(nranks, MPI_REQUEST_NULL),
      m_receives(nranks, MPI_REQUEST_NULL) {
    BRAID_MPI_CHECK(MPI_Comm_dup(comm, &m_comm));
    BRAID_MPI_CHECK(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
}

MpiArrivalExchange::~MpiArrivalExchange() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
}

void MpiArrivalExchange::abandon() {
    m_comm = MPI_COMM_NULL;
}

void MpiArrivalExchange::cancel_pending() {
    for (auto& request : m_receives)
        if (request != MPI_REQUEST_NULL) {
            // A cancelled receive completes locally, whatever the peer does.
            MPI_Cancel(&request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
        }
    // Sends of one word leave eagerly; one still pending is released, not waited for.
    for (auto& request : m_sends)
        if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
}

void MpiArrivalExchange::enter(uint64_t sequence, const Deadline& deadline,
                               const std::function<std::string()>& what) {
    if (m_nranks == 1) return;
    m_sent = sequence;
    constexpr int TAG = 0;
    for (uint32_t r = 0; r < m_nranks; ++r) {
        if (r == m_rank) continue;
        BRAID_MPI_CHECK(
            MPI_Irecv(&m_received[r], 1, MPI_UINT64_T, int(r), TAG, m_comm, &m_receives[r]));
    }
    for (uint32_t r = 0; r < m_nranks; ++r) {
        if (r == m_rank) continue;
        BRAID_MPI_CHECK(MPI_Isend(&m_sent, 1, MPI_UINT64_T, int(r), TAG, m_comm, &m_sends[r]));
    }
    std::vector<int> done(m_nranks);
    uint32_t waiting = m_nranks - 1;
    std::vector<uint32_t> out_of_step;
    for (uint64_t polls = 0;; ++polls) {
        int nr_done = 0;
        int rc = MPI_Testsome(int(m_nranks), m_receives.data(), &nr_done, done.data(),
                              MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            cancel_pending();
            detail::mpi_call_failed(rc, "MPI_Testsome", __FILE__, __LINE__);
        }
        for (int i = 0; i < nr_done && nr_done != MPI_UNDEFINED; ++i) {
            --waiting;
            if (m_received[done[i]] != sequence) out_of_step.push_back(uint32_t(done[i]));
        }
        int sent = 0;
        if (waiting == 0) {
            rc = MPI_Testall(int(m_nranks), m_sends.data(), &sent, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS) {
                cancel_pending();
                detail::mpi_call_failed(rc, "MPI_Testall", __FILE__, __LINE__);
            }
        }
        if (waiting == 0 && sent) break;
        if ((polls & 63) == 63) {
            if (deadline.passed()) {
                std::vector<uint32_t> missing;
                for (uint32_t r = 0; r < m_nranks; ++r)
                    if (m_receives[r] != MPI_REQUEST_NULL) missing.push_back(r);
                cancel_pending();
                throw TimeoutError(fmt::format(
                    "{} timed out after {}: {}; nobody entered the MPI call", what(),
                    format_duration(deadline.span()), describe_arrivals(m_nranks, missing)));
            }
            // Give the core away now and then: ranks may outnumber cores.
            if (polls > 4096) std::this_thread::yield();
        }
    }
    if (!out_of_step.empty()) {
        uint32_t r = out_of_step.front();
        BRAID_THROW(CommError,
                    "{}: rank {} entered collective #{} of this communicator while this rank "
                    "entered #{}; the ranks' calls are out of step",
                    what(), r, m_received[r], sequence);
    }
}

} // namespace braid::comm
