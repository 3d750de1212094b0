#include "parallel/shard_ilp.h"

#include "base/error.h"

#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

namespace braid::parallel {

namespace {

double at_or_zero(const std::vector<double>& v, size_t i) {
    return v.empty() ? 0.0 : v[i];
}

//! The problem after folding: edges between two nodes that both have a choice, summed per
//! ordered pair; everything else moved into node costs or the constant.
struct FoldedProblem {
    std::vector<std::vector<double>> cost, memory; //!< per node, per strategy
    struct Edge {
        size_t from, to;
        std::vector<double> cost, memory;
    };
    std::vector<Edge> edges;
    double constant_cost = 0, constant_memory = 0;
};

FoldedProblem fold(const ShardProblem& p) {
    FoldedProblem f;
    for (auto& n : p.nodes) {
        f.cost.push_back(n.cost);
        f.memory.push_back(n.memory.empty() ? std::vector<double>(n.cost.size(), 0.0) : n.memory);
    }
    std::map<std::pair<size_t, size_t>, size_t> index;
    for (auto& e : p.edges) {
        size_t nu = p.nodes[e.from].cost.size(), nv = p.nodes[e.to].cost.size();
        if (nu == 1 || nv == 1) {
            for (size_t i = 0; i < nu; ++i)
                for (size_t j = 0; j < nv; ++j) {
                    double c = e.cost[i * nv + j], m = at_or_zero(e.memory, i * nv + j);
                    if (nu == 1 && nv == 1) {
                        f.constant_cost += c;
                        f.constant_memory += m;
                    } else if (nu == 1) {
                        f.cost[e.to][j] += c;
                        f.memory[e.to][j] += m;
                    } else {
                        f.cost[e.from][i] += c;
                        f.memory[e.from][i] += m;
                    }
                }
            continue;
        }
        // One edge per unordered pair: a reversed edge is transposed into the first one.
        bool reversed = e.from > e.to;
        auto key = reversed ? std::pair{e.to, e.from} : std::pair{e.from, e.to};
        auto [it, fresh] = index.try_emplace(key, f.edges.size());
        if (fresh)
            f.edges.push_back({key.first, key.second, std::vector<double>(nu * nv, 0.0),
                               std::vector<double>(nu * nv, 0.0)});
        auto& fe = f.edges[it->second];
        size_t cols = p.nodes[fe.to].cost.size();
        for (size_t i = 0; i < nu; ++i)
            for (size_t j = 0; j < nv; ++j) {
                size_t cell = reversed ? j * cols + i : i * cols + j;
                fe.cost[cell] += e.cost[i * nv + j];
                fe.memory[cell] += at_or_zero(e.memory, i * nv + j);
            }
    }
    for (size_t v = 0; v < f.cost.size(); ++v)
        if (f.cost[v].size() == 1) {
            f.constant_cost += f.cost[v][0];
            f.constant_memory += f.memory[v][0];
        }
    return f;
}

struct GlpkProb {
    glp_prob* p = glp_create_prob();
    ~GlpkProb() { glp_delete_prob(p); }
};

} // namespace

void ShardProblem::validate() const {
    for (auto& n : nodes) {
        if (n.cost.empty())
            BRAID_THROW(ValueError, "sharding problem: node \"{}\" has no strategy", n.name);
        if (!n.memory.empty() && n.memory.size() != n.cost.size())
            BRAID_THROW(ValueError,
                        "sharding problem: node \"{}\" has {} memory figures for {} "
                        "strategies",
                        n.name, n.memory.size(), n.cost.size());
    }
    for (auto& e : edges) {
        if (e.from >= nodes.size() || e.to >= nodes.size())
            BRAID_THROW(ValueError,
                        "sharding problem: an edge names node {} -> {}, but there "
                        "are {} nodes",
                        e.from, e.to, nodes.size());
        size_t cells = nodes[e.from].cost.size() * nodes[e.to].cost.size();
        if (e.cost.size() != cells || (!e.memory.empty() && e.memory.size() != cells))
            BRAID_THROW(ValueError,
                        "sharding problem: edge \"{}\" -> \"{}\" has {} costs for {} "
                        "strategy pairs",
                        nodes[e.from].name, nodes[e.to].name, e.cost.size(), cells);
    }
}

double ShardProblem::objective(const std::vector<size_t>& choice) const {
    double sum = 0;
    for (size_t v = 0; v < nodes.size(); ++v) sum += nodes[v].cost[choice[v]];
    for (auto& e : edges) sum += e.cost[choice[e.from] * nodes[e.to].cost.size() + choice[e.to]];
    return sum;
}

double ShardProblem::memory(const std::vector<size_t>& choice) const {
    double sum = 0;
    for (size_t v = 0; v < nodes.size(); ++v) sum += at_or_zero(nodes[v].memory, choice[v]);
    for (auto& e : edges)
        sum += at_or_zero(e.memory, choice[e.from] * nodes[e.to].cost.size() + choice[e.to]);
    return sum;
}

std::vector<ShardSolution> solve_shard_ilp(const ShardProblem& problem, double time_limit_s,
                                           size_t runner_ups) {
    problem.validate();
    auto start = std::chrono::steady_clock::now();
    FoldedProblem f = fold(problem);
    const size_t n = f.cost.size();
    if (!std::isfinite(f.constant_cost))
        BRAID_THROW(ValueError, "sharding ILP: every plan takes a forbidden choice (two operators "
                                "with one strategy each joined by a forbidden edge)");

    GlpkProb prob;
    glp_set_obj_dir(prob.p, GLP_MIN);
    // GLPK's tolerances are absolute: costs of microseconds would fall below them, so the
    // objective is scaled to put the largest finite cost at 1e3. Infinite costs forbid their
    // choice (the column is fixed at 0).
    double largest = 0;
    for (auto& c : f.cost)
        for (double x : c)
            if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
    for (auto& e : f.edges)
        for (double x : e.cost)
            if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
    const double scale = largest > 0 ? 1e3 / largest : 1.0;
    auto coef = [&](int col, double cost) {
        if (std::isfinite(cost))
            glp_set_obj_coef(prob.p, col, cost * scale);
        else
            glp_set_col_bnds(prob.p, col, GLP_FX, 0.0, 0.0);
    };
    // Columns: s[v][i] for every node with a choice, then e[edge][i][j].
    std::vector<int> s_col(n, 0); // first column of node v (1-based), 0: no choice
    int cols = 0;
    for (size_t v = 0; v < n; ++v)
        if (f.cost[v].size() > 1) {
            s_col[v] = cols + 1;
            cols += int(f.cost[v].size());
        }
    std::vector<int> e_col(f.edges.size());
    for (size_t k = 0; k < f.edges.size(); ++k) {
        e_col[k] = cols + 1;
        cols += int(f.edges[k].cost.size());
    }
    if (cols > 0) glp_add_cols(prob.p, cols);
    for (size_t v = 0; v < n; ++v)
        for (size_t i = 0; s_col[v] && i < f.cost[v].size(); ++i) {
            int c = s_col[v] + int(i);
            glp_set_col_kind(prob.p, c, GLP_BV);
            coef(c, f.cost[v][i]);
        }
    for (size_t k = 0; k < f.edges.size(); ++k)
        for (size_t cell = 0; cell < f.edges[k].cost.size(); ++cell) {
            int c = e_col[k] + int(cell);
            glp_set_col_bnds(prob.p, c, GLP_DB, 0.0, 1.0);
            coef(c, f.edges[k].cost[cell]);
        }

    std::vector<int> ia{0}, ja{0};
    std::vector<double> ar{0.0};
    auto add_row = [&](int type, double lo, double hi) {
        int r = glp_add_rows(prob.p, 1);
        glp_set_row_bnds(prob.p, r, type, lo, hi);
        return r;
    };
    auto put = [&](int row, int col, double v) {
        ia.push_back(row);
        ja.push_back(col);
        ar.push_back(v);
    };
    for (size_t v = 0; v < n; ++v) {
        if (!s_col[v]) continue;
        int r = add_row(GLP_FX, 1.0, 1.0);
        for (size_t i = 0; i < f.cost[v].size(); ++i) put(r, s_col[v] + int(i), 1.0);
    }
    for (size_t k = 0; k < f.edges.size(); ++k) {
        auto& e = f.edges[k];
        size_t nu = f.cost[e.from].size(), nv = f.cost[e.to].size();
        for (size_t i = 0; i < nu; ++i) { // Σ_j e_ij = s_u,i
            int r = add_row(GLP_FX, 0.0, 0.0);
            for (size_t j = 0; j < nv; ++j) put(r, e_col[k] + int(i * nv + j), 1.0);
            put(r, s_col[e.from] + int(i), -1.0);
        }
        for (size_t j = 0; j < nv; ++j) { // Σ_i e_ij = s_v,j
            int r = add_row(GLP_FX, 0.0, 0.0);
            for (size_t i = 0; i < nu; ++i) put(r, e_col[k] + int(i * nv + j), 1.0);
            put(r, s_col[e.to] + int(j), -1.0);
        }
    }
    if (problem.memory_limit > 0) {
        int r = add_row(GLP_UP, 0.0, problem.memory_limit - f.constant_memory);
        for (size_t v = 0; v < n; ++v)
            for (size_t i = 0; s_col[v] && i < f.cost[v].size(); ++i)
                if (f.memory[v][i] != 0) put(r, s_col[v] + int(i), f.memory[v][i]);
        for (size_t k = 0; k < f.edges.size(); ++k)
            for (size_t cell = 0; cell < f.edges[k].memory.size(); ++cell)
                if (f.edges[k].memory[cell] != 0)
                    put(r, e_col[k] + int(cell), f.edges[k].memory[cell]);
    }
    if (ia.size() > 1) glp_load_matrix(prob.p, int(ia.size() - 1), ia.data(), ja.data(), ar.data());

    // The least memory any plan needs, for the error when none fits.
    auto least_memory = [&] {
        double m = f.constant_memory;
        for (size_t v = 0; v < n; ++v)
            if (s_col[v]) m += *std::min_element(f.memory[v].begin(), f.memory[v].end());
        return m;
    };

    std::vector<ShardSolution> solutions;
    size_t multi = std::count_if(s_col.begin(), s_col.end(), [](int c) { return c != 0; });
    for (size_t round = 0; round <= runner_ups; ++round) {
        if (round > 0) {
            if (multi == 0) break; // a single plan exists
            // Exclude the plan just found: at most multi - 1 of its choices may repeat.
            int r = glp_add_rows(prob.p, 1);
            glp_set_row_bnds(prob.p, r, GLP_UP, 0.0, double(multi) - 1.0);
            std::vector<int> idx{0};
            std::vector<double> val{0.0};
            for (size_t v = 0; v < n; ++v)
                if (s_col[v]) {
                    idx.push_back(s_col[v] + int(solutions.back().choice[v]));
                    val.push_back(1.0);
                }
            glp_set_mat_row(prob.p, r, int(idx.size() - 1), idx.data(), val.data());
        }
        double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        double left = time_limit_s - elapsed;
        if (left <= 0) {
            if (round == 0)
                BRAID_THROW(TimeoutError,
                            "sharding ILP: the time limit of {} s passed before "
                            "solving began",
                            time_limit_s);
            break;
        }
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.presolve = GLP_ON;
        parm.msg_lev = GLP_MSG_OFF;
        parm.tm_lim = int(std::min(left * 1000.0, double(std::numeric_limits<int>::max())));
        int rc = cols == 0 ? 0 : glp_intopt(prob.p, &parm);
        int status = cols == 0 ? GLP_OPT : glp_mip_status(prob.p);
        if (cols != 0 && rc != 0 && rc != GLP_ETMLIM && rc != GLP_ENOPFS && rc != GLP_ENODFS &&
            rc != GLP_EMIPGAP)
            BRAID_THROW(Error, "sharding ILP: GLPK's glp_intopt failed (code {})", rc);
        if (status != GLP_OPT && status != GLP_FEAS) {
            if (round > 0) break; // no further plan
            if (rc == GLP_ETMLIM)
                BRAID_THROW(TimeoutError,
                            "sharding ILP: no plan found within the time limit of "
                            "{} s ({} nodes, {} edges)",
                            time_limit_s, n, f.edges.size());
            BRAID_THROW(ValueError,
                        "sharding ILP: no plan fits the memory limit of {} bytes per "
                        "device; no plan needs less than {:.0f} bytes (the least of each "
                        "operator's strategies, before resharding)",
                        problem.memory_limit, least_memory());
        }
        ShardSolution s;
        s.choice.assign(n, 0);
        for (size_t v = 0; v < n; ++v) {
            if (!s_col[v]) continue;
            double best = -1;
            for (size_t i = 0; i < f.cost[v].size(); ++i) {
                double x = glp_mip_col_val(prob.p, s_col[v] + int(i));
                if (x > best) {
                    best = x;
                    s.choice[v] = i;
                }
            }
        }
        s.objective = problem.objective(s.choice);
        s.memory = problem.memory(s.choice);
        s.optimal = status == GLP_OPT;
        s.solve_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        solutions.push_back(std::move(s));
    }
    return solutions;
}

ShardSolution solve_shard_brute_force(const ShardProblem& problem, size_t max_combinations) {
    problem.validate();
    double combos = 1;
    for (auto& nd : problem.nodes) combos *= double(nd.cost.size());
    if (combos > double(max_combinations))
        BRAID_THROW(ValueError,
                    "sharding brute force: {:.0f} combinations, more than the {} "
                    "allowed",
                    combos, max_combinations);
    std::vector<size_t> choice(problem.nodes.size(), 0);
    ShardSolution best;
    best.objective = std::numeric_limits<double>::infinity();
    for (;;) {
        double m = problem.memory(choice);
        if (problem.memory_limit <= 0 || m <= problem.memory_limit) {
            double obj = problem.objective(choice);
            if (std::isfinite(obj) && obj < best.objective) {
                best.objective = obj;
                best.memory = m;
                best.choice = choice;
            }
        }
        size_t v = 0;
        while (v < choice.size() && ++choice[v] == problem.nodes[v].cost.size()) choice[v++] = 0;
        if (v == choice.size()) break;
    }
    if (best.choice.empty() && !problem.nodes.empty())
        BRAID_THROW(ValueError,
                    "sharding brute force: no combination fits the memory limit of "
                    "{} bytes",
                    problem.memory_limit);
    best.optimal = true;
    return best;
}

} // namespace braid::parallel
