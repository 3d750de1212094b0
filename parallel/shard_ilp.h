// The integer linear program of intra-operator sharding (Alpa, OSDI '22, section 4.2), on its
// own: it knows nothing of graphs, only nodes with candidate strategies and edges with
// resharding costs, so it can be solved and checked (against brute force) in isolation.
//
//   minimise   Σ_v Σ_i c[v][i] s[v][i]  +  Σ_(u,v) Σ_i Σ_j r[uv][i][j] e[uv][i][j]
//   subject to Σ_i s[v][i] = 1                 one strategy per node (s binary)
//              Σ_j e[uv][i][j] = s[u][i]       e is the product s[u][i] s[v][j]: with s
//              Σ_i e[uv][i][j] = s[v][j]       one-hot, these marginals force e to the one
//              e >= 0                          cell (i, j), so e need not be integer
//              Σ_v Σ_i m[v][i] s[v][i] + Σ_(u,v) Σ_ij w[uv][i][j] e[uv][i][j] <= limit
//
// An infinite cost forbids its choice (a strategy, or a pair of strategies on an edge).
// An edge whose end has a single strategy is folded into the other end's node costs before
// solving (its cost no longer depends on a choice of two), and parallel edges are summed.
// The solver is GLPK's branch and cut (Debian's libglpk-dev) with a time limit; when the limit
// stops it, the best plan found so far is returned and `optimal` says it is not proven.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace braid::parallel {

//! A sharding problem: nodes with per-strategy costs, edges with per-pair costs.
struct ShardProblem {
    struct Node {
        std::string name;
        std::vector<double> cost;   //!< seconds per strategy (compute and own communication)
        std::vector<double> memory; //!< bytes per strategy (empty: 0)
    };
    struct Edge {
        size_t from = 0, to = 0;    //!< node indices
        std::vector<double> cost;   //!< seconds, [i * to's strategies + j]
        std::vector<double> memory; //!< bytes, same layout (empty: 0)
    };
    std::vector<Node> nodes;
    std::vector<Edge> edges;
    double memory_limit = 0; //!< bytes per device; 0: no limit

    //! The objective of one choice per node (strategy indices).
    double objective(const std::vector<size_t>& choice) const;
    //! The memory of one choice per node.
    double memory(const std::vector<size_t>& choice) const;
    //! Throws ValueError for a node without strategies, cost vectors of the wrong size or an
    //! edge naming a node that does not exist.
    void validate() const;
};

//! A solution: one strategy per node.
struct ShardSolution {
    std::vector<size_t> choice;
    double objective = 0;
    double memory = 0;
    bool optimal = false; //!< proven optimal (not stopped by the time limit)
    double solve_seconds = 0;
};

/*!
 * Solves the problem with GLPK and returns the best plan, then up to `runner_ups` next-best
 * plans (each solved again with the plans before it excluded). Throws ValueError when no plan
 * fits the memory limit (naming the limit and a lower bound of what any plan needs), and
 * TimeoutError when the time limit passes before any plan was found.
 */
std::vector<ShardSolution> solve_shard_ilp(const ShardProblem& problem, double time_limit_s,
                                           size_t runner_ups = 0);

/*!
 * The optimum by trying every combination (tests; problems of up to `max_combinations`).
 * Throws ValueError when the problem is larger, or when no combination fits the memory limit.
 */
ShardSolution solve_shard_brute_force(const ShardProblem& problem,
                                      size_t max_combinations = 50'000'000);

} // namespace braid::parallel
