#include "parallel/mesh.h"

#include "base/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace braid::parallel {

namespace {

std::vector<uint32_t> iota_ranks(const std::vector<uint32_t>& shape) {
    uint64_t n = 1;
    for (uint32_t s : shape) n *= s;
    std::vector<uint32_t> ranks(n);
    for (uint64_t i = 0; i < n; ++i) ranks[i] = uint32_t(i);
    return ranks;
}

} // namespace

Mesh::Mesh(std::vector<uint32_t> shape, std::vector<std::string> axis_names)
    : Mesh(shape, std::move(axis_names), iota_ranks(shape)) {}

Mesh::Mesh(std::vector<uint32_t> shape, std::vector<std::string> axis_names,
           std::vector<uint32_t> devices)
    : m_shape(std::move(shape)), m_axis_names(std::move(axis_names)),
      m_devices(std::move(devices)) {
    if (m_shape.empty()) BRAID_THROW(ValueError, "Mesh: the shape has no axes; expected 1 or more");
    if (m_axis_names.size() != m_shape.size())
        BRAID_THROW(ValueError, "Mesh: {} axis names [{}] for a shape of {} axes {}",
                    m_axis_names.size(), fmt::join(m_axis_names, ", "), m_shape.size(),
                    fmt::join(m_shape, "x"));
    uint64_t n = 1;
    std::set<std::string> seen;
    for (size_t i = 0; i < m_shape.size(); ++i) {
        if (m_shape[i] == 0)
            BRAID_THROW(ValueError, "Mesh: axis \"{}\" has size 0; expected 1 or more",
                        m_axis_names[i]);
        if (m_axis_names[i].empty()) BRAID_THROW(ValueError, "Mesh: axis {} has an empty name", i);
        if (!seen.insert(m_axis_names[i]).second)
            BRAID_THROW(ValueError, "Mesh: axis name \"{}\" appears twice in [{}]", m_axis_names[i],
                        fmt::join(m_axis_names, ", "));
        n *= m_shape[i];
        if (n > (uint64_t(1) << 20))
            BRAID_THROW(ValueError, "Mesh: shape {} has more than 2^20 ranks",
                        fmt::join(m_shape, "x"));
    }
    if (m_devices.size() != n)
        BRAID_THROW(ValueError, "Mesh: {} ranks given for a mesh of shape {}; expected {}",
                    m_devices.size(), fmt::join(m_shape, "x"), n);
    std::set<uint32_t> ranks(m_devices.begin(), m_devices.end());
    if (ranks.size() != m_devices.size()) {
        std::vector<uint32_t> sorted = m_devices;
        std::sort(sorted.begin(), sorted.end());
        auto dup = std::adjacent_find(sorted.begin(), sorted.end());
        BRAID_THROW(ValueError, "Mesh: rank {} appears more than once in [{}]", *dup,
                    fmt::join(m_devices, ", "));
    }
}

size_t Mesh::axis_index(const std::string& axis) const {
    for (size_t i = 0; i < m_axis_names.size(); ++i)
        if (m_axis_names[i] == axis) return i;
    BRAID_THROW(ValueError, "{}: no axis named \"{}\"; the axes are [{}]", to_string(), axis,
                fmt::join(m_axis_names, ", "));
}

bool Mesh::contains(uint32_t rank) const {
    return std::find(m_devices.begin(), m_devices.end(), rank) != m_devices.end();
}

uint32_t Mesh::position_of(uint32_t rank) const {
    auto it = std::find(m_devices.begin(), m_devices.end(), rank);
    if (it == m_devices.end())
        BRAID_THROW(ValueError, "{}: rank {} is not in the mesh; its ranks are [{}]", to_string(),
                    rank, fmt::join(m_devices, ", "));
    return uint32_t(it - m_devices.begin());
}

std::vector<uint32_t> Mesh::coords_at(uint32_t pos) const {
    std::vector<uint32_t> coords(m_shape.size());
    for (size_t d = m_shape.size(); d-- > 0;) {
        coords[d] = pos % m_shape[d];
        pos /= m_shape[d];
    }
    return coords;
}

std::vector<uint32_t> Mesh::coords_of(uint32_t rank) const {
    return coords_at(position_of(rank));
}

uint32_t Mesh::rank_at(const std::vector<uint32_t>& coords) const {
    if (coords.size() != m_shape.size())
        BRAID_THROW(ValueError, "{}: coordinates ({}) have {} entries; expected {}", to_string(),
                    fmt::join(coords, ", "), coords.size(), m_shape.size());
    uint64_t pos = 0;
    for (size_t d = 0; d < m_shape.size(); ++d) {
        if (coords[d] >= m_shape[d])
            BRAID_THROW(ValueError, "{}: coordinate {} along axis \"{}\" is out of range 0..{}",
                        to_string(), coords[d], m_axis_names[d], m_shape[d] - 1);
        pos = pos * m_shape[d] + coords[d];
    }
    return m_devices[pos];
}

std::vector<std::vector<uint32_t>> Mesh::axis_groups(const std::string& axis) const {
    size_t a = axis_index(axis);
    std::vector<std::vector<uint32_t>> groups;
    // Walk every rank in row-major order; the ones at coordinate 0 along the axis start a
    // sub-group, which then takes the ranks at coordinates 1.. of the axis.
    for (uint32_t pos = 0; pos < size(); ++pos) {
        auto coords = coords_at(pos);
        if (coords[a] != 0) continue;
        std::vector<uint32_t> group;
        for (uint32_t c = 0; c < m_shape[a]; ++c) {
            coords[a] = c;
            group.push_back(rank_at(coords));
        }
        groups.push_back(std::move(group));
    }
    return groups;
}

std::vector<uint32_t> Mesh::axis_group_of(uint32_t rank, const std::string& axis) const {
    size_t a = axis_index(axis);
    auto coords = coords_of(rank);
    std::vector<uint32_t> group;
    for (uint32_t c = 0; c < m_shape[a]; ++c) {
        coords[a] = c;
        group.push_back(rank_at(coords));
    }
    return group;
}

std::string Mesh::subgroup_key(uint32_t rank, const std::string& axis,
                               const std::string& prefix) const {
    size_t a = axis_index(axis);
    auto coords = coords_of(rank);
    std::vector<std::string> others;
    for (size_t d = 0; d < m_shape.size(); ++d)
        if (d != a) others.push_back(fmt::format("{}={}", m_axis_names[d], coords[d]));
    if (others.empty()) return fmt::format("{}/{}", prefix, axis);
    return fmt::format("{}/{}[{}]", prefix, axis, fmt::join(others, ","));
}

opr::Group Mesh::group(uint32_t rank, const std::string& axis,
                       std::shared_ptr<comm::GroupClient> client, const std::string& backend,
                       const std::string& key_prefix) const {
    if (!client)
        BRAID_THROW(ValueError, "{}: no group client given for axis \"{}\"", to_string(), axis);
    opr::Group g;
    g.key_prefix = subgroup_key(rank, axis, key_prefix);
    g.size = axis_size(axis);
    g.rank = int32_t(coords_of(rank)[axis_index(axis)]);
    g.client = std::move(client);
    g.backend = backend;
    g.root = 0;
    return g;
}

std::string Mesh::to_string() const {
    std::vector<std::string> axes;
    for (size_t d = 0; d < m_shape.size(); ++d)
        axes.push_back(fmt::format("{}={}", m_axis_names[d], m_shape[d]));
    return fmt::format("Mesh{{{}}}", fmt::join(axes, ","));
}

MeshGroups::MeshGroups(Mesh mesh, uint32_t rank, std::shared_ptr<comm::GroupClient> client,
                       std::string backend, std::string key_prefix, CompNode comp_node)
    : m_mesh(std::move(mesh)), m_rank(rank), m_coords(m_mesh.coords_of(rank)),
      m_client(std::move(client)), m_backend(std::move(backend)),
      m_key_prefix(std::move(key_prefix)), m_comp_node(comp_node) {
    if (!m_client)
        BRAID_THROW(ValueError, "MeshGroups on {}: no group client given for rank {}",
                    m_mesh.to_string(), rank);
}

uint32_t MeshGroups::coord(const std::string& axis) const {
    return m_coords[m_mesh.axis_index(axis)];
}

const opr::Group& MeshGroups::group(const std::string& axis) {
    auto it = m_groups.find(axis);
    if (it != m_groups.end()) return it->second;
    opr::Group g = m_mesh.group(m_rank, axis, m_client, m_backend, m_key_prefix);
    g.comp_node = m_comp_node;
    return m_groups.emplace(axis, std::move(g)).first->second;
}

Mesh parse_mesh(const std::string& text) {
    std::vector<uint32_t> shape;
    std::vector<std::string> names;
    bool named = text.find('=') != std::string::npos;
    char sep = named ? ',' : 'x';
    size_t begin = 0;
    while (begin <= text.size()) {
        size_t end = text.find(sep, begin);
        if (end == std::string::npos) end = text.size();
        std::string part = text.substr(begin, end - begin), size = part;
        if (named) {
            size_t eq = part.find('=');
            if (eq == std::string::npos || eq == 0)
                BRAID_THROW(ValueError, "mesh \"{}\": \"{}\" is not NAME=SIZE", text, part);
            names.push_back(part.substr(0, eq));
            size = part.substr(eq + 1);
        } else {
            names.push_back(std::string(1, char('x' + (names.size() % 3))) +
                            (names.size() >= 3 ? std::to_string(names.size() / 3) : ""));
        }
        if (size.empty() || size.find_first_not_of("0123456789") != std::string::npos ||
            size.size() > 6 || std::stoul(size) == 0)
            BRAID_THROW(ValueError,
                        "mesh \"{}\": axis size \"{}\" is not a number from 1; "
                        "expected e.g. 2x2 or dp=2,tp=2",
                        text, size);
        shape.push_back(uint32_t(std::stoul(size)));
        begin = end + 1;
    }
    return Mesh(std::move(shape), std::move(names));
}

} // namespace braid::parallel
