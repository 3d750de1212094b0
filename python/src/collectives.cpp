// Collectives from Python: braid.Group is one rank's view of a group of ranks, and braid.ops'
// all_reduce, all_gather, reduce_scatter and all_to_all insert CollectiveComm operators into
// that rank's graph. Ranks meet through a group manager:
//   - Group.threads(n): n ranks as Python threads of this process (backend "local", an
//     in-process group manager), rank r's operators on comp node cpu<r>;
//   - Group.mpi(): this process's rank under mpirun (backend "mpi", MPI rank 0 hosts the group
//     manager);
//   - Group.launch(): this process's rank under braid-launch (BRAID_RANK, BRAID_WORLD_SIZE and
//     BRAID_SERVER set; backend "gloo").
// Every rank builds its graph the same way, so its collectives get the same keys in the same
// order. A collective waits for its peers until BRAID_COMM_TIMEOUT (or the run's deadline).
#include "bindings.h"

#include "base/error.h"
#include "base/host_port.h"
#include "collective/collective_comm.h"
#include "comm/group_client.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_rendezvous.h"
#include "comm/tcp_client.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

namespace braid::python {

namespace {

opr::Group make_group(std::string key, uint32_t size, uint32_t rank,
                      std::shared_ptr<comm::GroupClient> client, std::string backend,
                      const std::string& comp_node) {
    opr::Group g;
    g.key_prefix = std::move(key);
    g.size = size;
    g.rank = int32_t(rank);
    g.client = std::move(client);
    g.backend = std::move(backend);
    if (!comp_node.empty()) g.comp_node = CompNode::load(comp_node);
    return g;
}

//! This process's MPI rendezvous, made by the first Group.mpi() and kept to the end of the
//! process (its rank 0 hosts the group manager every rank's collectives meet at).
comm::MpiRendezvous& mpi_rendezvous() {
    static std::once_flag once;
    static comm::MpiRendezvous* rendezvous = nullptr;
    std::call_once(once, [] {
        comm::mpi_ensure_initialized();
        rendezvous = new comm::MpiRendezvous(); // never destroyed: peers may still use it
    });
    return *rendezvous;
}

int env_int(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v)
        BRAID_THROW(ValueError,
                    "Group.launch: {} is not set: run the script under braid-launch -n N -- ...",
                    name);
    return std::atoi(v);
}

const opr::Group& group_of(const py::object& g) {
    return g.cast<const opr::Group&>();
}

} // namespace

void bind_collectives(py::module_& m) {
    py::class_<opr::Group>(m, "Group", "One rank's view of a group of ranks.")
        .def_static(
            "threads",
            [](uint32_t n, const std::string& key) {
                if (n == 0) BRAID_THROW(ValueError, "Group.threads: a group needs at least 1 rank");
                auto client = std::make_shared<comm::InProcessGroupClient>();
                std::vector<opr::Group> ranks;
                for (uint32_t r = 0; r < n; ++r)
                    ranks.push_back(
                        make_group(key, n, r, client, "local", fmt::format("cpu{}", r)));
                return ranks;
            },
            py::arg("n"), py::arg("key") = "group",
            "n ranks as threads of this process: the Group of each rank, rank r on comp node "
            "cpu<r> (build rank r's graph with braid.Graph(comp_node=groups[r].comp_node)).")
        .def_static(
            "mpi",
            [](const std::string& key) {
                auto& rv = mpi_rendezvous();
                return make_group(key, uint32_t(rv.world_size()), uint32_t(rv.world_rank()),
                                  rv.client(), "mpi", "");
            },
            py::arg("key") = "group", "This process's rank of MPI_COMM_WORLD, under mpirun.")
        .def_static(
            "launch",
            [](const std::string& key, const std::string& backend) {
                int rank = env_int("BRAID_RANK"), size = env_int("BRAID_WORLD_SIZE");
                const char* server = std::getenv("BRAID_SERVER");
                auto hp = host_port_or_throw(server ? server : "", "BRAID_SERVER");
                auto client = std::make_shared<comm::TcpGroupClient>(hp.host, hp.port);
                return make_group(key, uint32_t(size), uint32_t(rank), client, backend, "");
            },
            py::arg("key") = "group", py::arg("backend") = "gloo",
            "This process's rank under braid-launch (BRAID_RANK, BRAID_WORLD_SIZE, BRAID_SERVER).")
        .def_property_readonly("rank", [](const opr::Group& g) { return g.rank; })
        .def_property_readonly("size", [](const opr::Group& g) { return g.size; })
        .def_property_readonly("backend", [](const opr::Group& g) { return g.backend; })
        .def_property_readonly("comp_node",
                               [](const opr::Group& g) -> py::object {
                                   if (!g.comp_node.valid()) return py::none();
                                   return py::str(g.comp_node.locator());
                               })
        .def("__repr__", [](const opr::Group& g) {
            return fmt::format("Group(rank={}, size={}, backend='{}')", g.rank, g.size, g.backend);
        });

    py::module_ ops = m.attr("ops");
    ops.def(
        "all_reduce",
        [](const Var& x, const py::object& group, const std::string& op) {
            const auto& g = group_of(group);
            if (op == "sum") return wrap(x, opr::all_reduce_sum(x.var, g));
            if (op == "max") return wrap(x, opr::all_reduce_max(x.var, g));
            if (op == "min") return wrap(x, opr::all_reduce_min(x.var, g));
            BRAID_THROW(ValueError, "all_reduce: op \"{}\": expected \"sum\", \"max\" or \"min\"",
                        op);
        },
        py::arg("x"), py::arg("group"), py::arg("op") = "sum",
        "x reduced over the group's ranks; every rank gets the result.");
    ops.def(
        "all_gather",
        [](const Var& x, const py::object& group) {
            return wrap(x, opr::all_gather(x.var, group_of(group)));
        },
        py::arg("x"), py::arg("group"), "The ranks' x concatenated along dim 0, in rank order.");
    ops.def(
        "reduce_scatter",
        [](const Var& x, const py::object& group) {
            return wrap(x, opr::reduce_scatter_sum(x.var, group_of(group)));
        },
        py::arg("x"), py::arg("group"), "The sum over ranks, split along dim 0: this rank's part.");
    ops.def(
        "all_to_all",
        [](const Var& x, const py::object& group) {
            return wrap(x, opr::all_to_all(x.var, group_of(group)));
        },
        py::arg("x"), py::arg("group"),
        "x split along dim 0 into one part per rank; part r goes to rank r, and the parts "
        "received are concatenated in rank order.");
}

} // namespace braid::python
