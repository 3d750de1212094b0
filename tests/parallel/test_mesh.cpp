// Mesh: row-major device order, the sub-groups of each axis, and the Groups (sizes, ranks,
// keys) that collectives over an axis run in.
#include "parallel/mesh.h"

#include "base/error.h"
#include "comm/group_client.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace braid;
using namespace braid::parallel;

namespace {

using Groups = std::vector<std::vector<uint32_t>>;

//! The message of the ValueError `fn` throws ("" when it throws none).
template <typename Fn> std::string value_error(Fn&& fn) {
    try {
        fn();
    } catch (const ValueError& e) {
        return e.what();
    }
    return "";
}

std::shared_ptr<comm::GroupClient> fresh_client() {
    return std::make_shared<comm::InProcessGroupClient>(std::make_shared<comm::GroupManager>());
}

} // namespace

TEST(Mesh, OrdersRanksRowMajor) {
    Mesh mesh({2, 4}, {"x", "y"});
    EXPECT_EQ(mesh.size(), 8u);
    EXPECT_EQ(mesh.coords_of(6), (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(mesh.coords_of(3), (std::vector<uint32_t>{0, 3}));
    EXPECT_EQ(mesh.rank_at({1, 1}), 5u);
    EXPECT_EQ(mesh.to_string(), "Mesh{x=2,y=4}");
}

TEST(Mesh, CollectiveOverTheFirstAxisOfTwoByFourRunsAsFourGroupsOfTwo) {
    Mesh mesh({2, 4}, {"x", "y"});
    EXPECT_EQ(mesh.axis_groups("x"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(mesh.axis_groups("y"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_EQ(mesh.axis_group_of(6, "x"), (std::vector<uint32_t>{2, 6}));
    EXPECT_EQ(mesh.axis_group_of(6, "y"), (std::vector<uint32_t>{4, 5, 6, 7}));
}

TEST(Mesh, TwoByTwoOneByThreeAndThreeByOneHaveTheirSubGroups) {
    Mesh square({2, 2}, {"x", "y"});
    EXPECT_EQ(square.axis_groups("x"), (Groups{{0, 2}, {1, 3}}));
    EXPECT_EQ(square.axis_groups("y"), (Groups{{0, 1}, {2, 3}}));
    Mesh row({1, 3}, {"x", "y"});
    EXPECT_EQ(row.axis_groups("x"), (Groups{{0}, {1}, {2}}));
    EXPECT_EQ(row.axis_groups("y"), (Groups{{0, 1, 2}}));
    Mesh column({3, 1}, {"x", "y"});
    EXPECT_EQ(column.axis_groups("x"), (Groups{{0, 1, 2}}));
    EXPECT_EQ(column.axis_groups("y"), (Groups{{0}, {1}, {2}}));
}

TEST(Mesh, KeepsAGivenDeviceOrder) {
    Mesh mesh({2, 2}, {"x", "y"}, {3, 1, 0, 2});
    EXPECT_EQ(mesh.rank_at({1, 0}), 0u);
    EXPECT_EQ(mesh.coords_of(3), (std::vector<uint32_t>{0, 0}));
    EXPECT_EQ(mesh.axis_groups("x"), (Groups{{3, 0}, {1, 2}}));
    EXPECT_EQ(mesh.axis_groups("y"), (Groups{{3, 1}, {0, 2}}));
}

TEST(Mesh, GroupOfARankHasTheAxisSizeItsCoordinateAndAKeyPerSubGroup) {
    Mesh mesh({2, 3, 2}, {"x", "y", "z"});
    auto client = fresh_client();
    for (const std::string axis : {"x", "y", "z"}) {
        SCOPED_TRACE(axis);
        std::map<std::string, std::set<uint32_t>> members_by_key;
        for (uint32_t r = 0; r < mesh.size(); ++r) {
            auto g = mesh.group(r, axis, client);
            EXPECT_EQ(g.size, mesh.axis_size(axis));
            EXPECT_EQ(uint32_t(g.rank), mesh.coords_of(r)[mesh.axis_index(axis)]);
            EXPECT_EQ(g.client, client);
            members_by_key[g.key_prefix].insert(r);
        }
        // One key per sub-group, shared exactly by that sub-group's ranks.
        auto groups = mesh.axis_groups(axis);
        ASSERT_EQ(members_by_key.size(), groups.size());
        for (const auto& group : groups) {
            auto key = mesh.group(group[0], axis, client).key_prefix;
            EXPECT_EQ(members_by_key[key], std::set<uint32_t>(group.begin(), group.end())) << key;
        }
    }
    EXPECT_EQ(mesh.subgroup_key(7, "y", "m"), "m/y[x=1,z=1]");
    EXPECT_EQ(Mesh({4}, {"d"}).subgroup_key(2, "d", "m"), "m/d");
}

TEST(MeshGroups, SuccessiveCollectivesOverOneAxisGetSuccessiveKeys) {
    Mesh mesh({2, 2}, {"x", "y"});
    MeshGroups groups(mesh, 3, fresh_client(), "local", "net");
    EXPECT_EQ(groups.coord("x"), 1u);
    EXPECT_EQ(groups.coord("y"), 1u);
    auto first = groups.group("x").param(opr::CollectiveMode::ALL_GATHER, dtype::Float32());
    auto second = groups.group("x").param(opr::CollectiveMode::ALL_GATHER, dtype::Float32());
    auto other = groups.group("y").param(opr::CollectiveMode::ALL_GATHER, dtype::Float32());
    EXPECT_EQ(first.key, "net/x[y=1]:0");
    EXPECT_EQ(second.key, "net/x[y=1]:1");
    EXPECT_EQ(other.key, "net/y[x=1]:0");
    EXPECT_EQ(first.rank, 1);
    EXPECT_EQ(first.nr_devices, 2u);
}

TEST(Mesh, InvalidMeshesAreValueErrorsThatSayWhatIsWrong) {
    auto msg = value_error([] { Mesh({2, 0}, {"x", "y"}); });
    EXPECT_NE(msg.find("axis \"y\" has size 0"), std::string::npos) << msg;
    msg = value_error([] { Mesh({2, 2}, {"x"}); });
    EXPECT_NE(msg.find("1 axis names [x] for a shape of 2 axes"), std::string::npos) << msg;
    msg = value_error([] { Mesh({2, 2}, {"x", "x"}); });
    EXPECT_NE(msg.find("\"x\" appears twice"), std::string::npos) << msg;
    msg = value_error([] { Mesh({}, {}); });
    EXPECT_NE(msg.find("no axes"), std::string::npos) << msg;
    msg = value_error([] { Mesh({2, 2}, {"x", "y"}, {0, 1, 2}); });
    EXPECT_NE(msg.find("3 ranks given for a mesh of shape 2x2; expected 4"), std::string::npos)
        << msg;
    msg = value_error([] { Mesh({2, 2}, {"x", "y"}, {0, 1, 1, 3}); });
    EXPECT_NE(msg.find("rank 1 appears more than once"), std::string::npos) << msg;
    Mesh mesh({2, 2}, {"x", "y"});
    msg = value_error([&] { mesh.axis_index("z"); });
    EXPECT_NE(msg.find("no axis named \"z\"; the axes are [x, y]"), std::string::npos) << msg;
    msg = value_error([&] { mesh.coords_of(4); });
    EXPECT_NE(msg.find("rank 4 is not in the mesh"), std::string::npos) << msg;
    msg = value_error([&] { mesh.rank_at({0, 2}); });
    EXPECT_NE(msg.find("coordinate 2 along axis \"y\" is out of range 0..1"), std::string::npos)
        << msg;
}
