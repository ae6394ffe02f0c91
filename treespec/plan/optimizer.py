"""Sequoia's tree optimizer (Chen et al. 2024) and the hardware-aware choice of tree size and depth.

Acceptance: `accept[k-1]` = P_k, the *unconditional* probability that the k-th ranked child of an accepted
node is the one accepted (sum <= 1). A 2-D `accept[d-1, k-1]` gives P_k for children at depth d (depths
past the last row reuse it). For a node v with rank path (k_1..k_m), f(v) = prod_j P_{k_j}; the expected
tokens per target pass of a tree (incl. the bonus token) is G(tree) = sum_v f(v).

DP over (n nodes, root at absolute depth a, root has b children), with D = max levels incl. the root:
    T[1, a, 0] = 1
    T[n, a, b] = max_{1<=m<n} T[n-m, a, b-1] + P[a+1, b] * Best[m, a+1]
    Best[n, a] = max_b T[n, a, b]           (Best[n, D-1] is finite only for n = 1)
The optimum for (budget, D) is Best[budget, 0]; `sequoia_tree` rebuilds it from the argmaxes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from treespec.decode.tree import TreeShape
from treespec.errors import ConfigError


def as_acceptance(accept: Sequence[float] | np.ndarray) -> np.ndarray:
    """Validate an acceptance vector [K] or matrix [D, K] and return it as a float64 matrix [D, K]."""
    matrix = np.asarray(accept, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise ConfigError(f"acceptance must be a non-empty vector or a depth x rank matrix, got shape {matrix.shape}")
    if not np.isfinite(matrix).all() or (matrix < 0).any():
        raise ConfigError("acceptance probabilities must be finite and >= 0")
    if (matrix.sum(axis=1) > 1 + 1e-6).any():
        raise ConfigError(
            f"acceptance rows must sum to at most 1 (they are unconditional P_k), got sums {matrix.sum(axis=1).round(4).tolist()}"
        )
    return matrix


def _row(matrix: np.ndarray, depth: int) -> np.ndarray:
    """P for children at `depth` (>= 1)."""
    return matrix[min(depth, matrix.shape[0]) - 1]


def node_probabilities(tree: TreeShape, accept: Sequence[float] | np.ndarray) -> np.ndarray:
    """f(v) for every node [N]: the probability that node v is accepted (0 for ranks beyond K)."""
    matrix = as_acceptance(accept)
    f = np.ones(tree.size)
    for i in range(1, tree.size):
        row = _row(matrix, tree.depths[i])
        rank = tree.ranks[i]
        f[i] = f[tree.parents[i]] * (row[rank] if rank < row.size else 0.0)
    return f


def expected_tokens(tree: TreeShape, accept: Sequence[float] | np.ndarray) -> float:
    """G(tree) = sum_v f(v): expected tokens produced per target pass, bonus included."""
    return float(node_probabilities(tree, accept).sum())


def _validate_limits(budget: int, max_depth: int | None) -> int:
    if int(budget) != budget or budget < 1:
        raise ConfigError(f"budget (nodes verified per pass, incl. the root) must be an integer >= 1, got {budget}")
    if max_depth is None:
        return int(budget)
    if int(max_depth) != max_depth or max_depth < 1:
        raise ConfigError(f"max_depth (levels incl. the root) must be an integer >= 1, got {max_depth}")
    return int(min(max_depth, budget))


@dataclass(frozen=True)
class _Tables:
    best: np.ndarray  # [budget+1, D] Best[n, a]
    best_b: np.ndarray  # [budget+1, D] argmax b
    split: np.ndarray  # [budget+1, D, K+1] argmax m of T[n, a, b]


def _solve(matrix: np.ndarray, budget: int, levels: int) -> _Tables:
    k_max = budget - 1  # ranks beyond the measured ones are allowed, with P = 0
    if matrix.shape[1] < k_max:
        matrix = np.pad(matrix, ((0, 0), (0, k_max - matrix.shape[1])))
    neg = -np.inf
    best = np.full((budget + 1, levels), neg)
    best_b = np.zeros((budget + 1, levels), dtype=np.int64)
    split = np.zeros((budget + 1, levels, k_max + 1), dtype=np.int64)
    for a in range(levels - 1, -1, -1):
        table = np.full((budget + 1, k_max + 1), neg)  # T[n, a, b]
        table[1, 0] = 1.0
        if a < levels - 1:
            row = _row(matrix, a + 1)
            child_best = best[:, a + 1]
            n_idx, m_idx = np.meshgrid(np.arange(budget + 1), np.arange(budget + 1), indexing="ij")
            valid = (m_idx >= 1) & (m_idx < n_idx)  # the b-th subtree takes m of the n nodes
            rest = np.where(valid, n_idx - m_idx, 0)
            feasible = np.isfinite(child_best)
            finite_best = np.where(feasible, child_best, 0.0)
            for b in range(1, k_max + 1):
                gain = np.where(feasible, row[b - 1] * finite_best, neg)  # [m]: the b-th child's subtree value
                values = np.where(valid, table[rest, b - 1] + gain[m_idx], neg)  # [n, m]
                split[:, a, b] = values.argmax(axis=1)
                table[:, b] = values.max(axis=1)
        best[:, a] = table.max(axis=1)
        best_b[:, a] = table.argmax(axis=1)
    return _Tables(best, best_b, split)


def optimal_values(accept: Sequence[float] | np.ndarray, budget: int, max_depth: int | None = None) -> np.ndarray:
    """G*(n) for n = 1..budget under the depth limit: array [budget] (index n-1; -inf where no tree fits)."""
    levels = _validate_limits(budget, max_depth)
    tables = _solve(as_acceptance(accept), int(budget), levels)
    return tables.best[1:, 0].copy()


def sequoia_tree(accept: Sequence[float] | np.ndarray, budget: int, max_depth: int | None = None) -> TreeShape:
    """The tree of exactly `budget` nodes (incl. the root) and at most `max_depth` levels maximising G."""
    levels = _validate_limits(budget, max_depth)
    if budget > 1 and levels < 2:
        raise ConfigError(f"a tree of {budget} nodes needs max_depth >= 2 (max_depth counts levels incl. the root)")
    matrix = as_acceptance(accept)
    tables = _solve(matrix, int(budget), levels)

    paths: list[tuple[int, ...]] = []

    def build(prefix: tuple[int, ...], n: int, a: int) -> None:
        paths.append(prefix)
        b = int(tables.best_b[n, a])
        subtrees = []
        while b > 0:  # peel children off from the last rank: T[n, a, b] = T[n-m, a, b-1] + ...
            m = int(tables.split[n, a, b])
            subtrees.append((b - 1, m))
            n, b = n - m, b - 1
        for rank, m in subtrees:
            build(prefix + (rank,), m, a + 1)

    build((), int(budget), 0)
    provenance = {"policy": "sequoia", "budget": int(budget), "max_depth": max_depth,
                  "acceptance": matrix.tolist() if matrix.shape[0] > 1 else matrix[0].tolist(),
                  "expected_tokens": float(tables.best[budget, 0])}
    return TreeShape.from_paths(paths, provenance)


def level_widths(tree: TreeShape) -> tuple[int, ...]:
    """Nodes expanded by each draft level: w_l = nodes at depth l that have children, l = 0 .. levels-2."""
    return tuple(sum(1 for v in nodes if tree.children[v]) for nodes in tree.level_nodes[:-1])


@dataclass(frozen=True)
class _InternalTables:
    """Best G by (nodes, levels left, depth row, internal nodes): the DP behind width-aware planning."""

    best: np.ndarray  # [N+1, L+1, R, I+1] Best[n, r, a, i]: n nodes, at most r levels, root at depth a (clamped)
    best_b: np.ndarray  # [N+1, L+1, R, I+1] children of the subtree's root
    split_m: np.ndarray  # [N+1, L+1, R, K+1, I+1] nodes of the b-th child's subtree
    split_j: np.ndarray  # [N+1, L+1, R, K+1, I+1] internal nodes of the b-th child's subtree
    rows: int  # R: root depths 0..R-2 exactly, R-1 stands for every deeper one (they share the last row)


def _solve_internal(matrix: np.ndarray, budget: int, levels: int, max_internal: int) -> _InternalTables:
    """Sequoia's DP with one more index, the number of internal nodes (nodes with children, root included),
    solved for every depth limit at once (r = levels left; a = the subtree root's depth, clamped to the
    acceptance matrix's last row, past which all depths behave alike):
        T[n, r, a, b, i] = max_{m, j} T[n-m, r, a, b-1, i-j-[b=1]] + P[a+1, b] * Best[m, r-1, a+1, j]
    Ranks whose P is 0 at every depth are left out (they add cost and no expected tokens)."""
    ranks = int(np.max(np.nonzero(matrix.max(axis=0) > 0)[0], initial=-1)) + 1
    ranks = max(1, min(ranks, budget - 1)) if budget > 1 else 0
    if matrix.shape[1] < ranks:
        matrix = np.pad(matrix, ((0, 0), (0, ranks - matrix.shape[1])))
    n_max, i_max, rows, neg = budget, max_internal, matrix.shape[0], -np.inf
    best = np.full((n_max + 1, levels + 1, rows, i_max + 1), neg)
    best[1, 1:, :, 0] = 1.0  # a single node fits every depth limit
    best_b = np.zeros(best.shape, dtype=np.int64)
    split_m = np.zeros((n_max + 1, levels + 1, rows, ranks + 1, i_max + 1), dtype=np.int64)
    split_j = np.zeros_like(split_m)
    n_idx = np.arange(n_max + 1)[:, None, None, None]  # axes [n, i, m, j]: (m, j) flatten for the argmax
    i_idx = np.arange(i_max + 1)[None, :, None, None]
    m_idx = np.arange(n_max + 1)[None, None, :, None]
    j_idx = np.arange(i_max + 1)[None, None, None, :]
    gathers = []  # per b: (valid [n, i, m, j], rows n - m, internal counts left)
    for b in range(1, ranks + 1):
        rest_i = i_idx - j_idx - (1 if b == 1 else 0)  # internal nodes left for the root and first b-1 subtrees
        valid = (m_idx >= 1) & (m_idx < n_idx) & (rest_i >= 0)
        gathers.append((valid, np.where(valid, n_idx - m_idx, 0), np.where(valid, rest_i, 0)))
    for r in range(2, levels + 1):
        for a in range(rows):
            row = _row(matrix, a + 1)
            child = best[:, r - 1, min(a + 1, rows - 1), :]  # [m, j]
            finite = np.isfinite(child)
            table = np.full((n_max + 1, ranks + 1, i_max + 1), neg)  # T[n, b, i]
            table[1, 0, 0] = 1.0
            for b, (valid, rest_n, rest_i) in enumerate(gathers, start=1):
                gain = np.where(finite, row[b - 1] * np.where(finite, child, 0.0), neg)  # [m, j]
                values = np.where(valid, table[rest_n, b - 1, rest_i] + gain, neg)  # [n, i, m, j]
                values = values.reshape(n_max + 1, i_max + 1, -1)  # [n, i, m * j]
                flat = values.argmax(axis=2)
                table[:, b, :] = np.take_along_axis(values, flat[..., None], axis=2)[..., 0]
                split_m[:, r, a, b, :], split_j[:, r, a, b, :] = np.divmod(flat, i_max + 1)
            best[:, r, a, :] = table.max(axis=1)
            best_b[:, r, a, :] = table.argmax(axis=1)
    return _InternalTables(best, best_b, split_m, split_j, rows)


def _rebuild_internal(tables: _InternalTables, n: int, levels: int, internal: int) -> list[tuple[int, ...]]:
    """Rank paths of the tree behind Best[n, levels, 0, internal]."""
    paths: list[tuple[int, ...]] = []

    def build(prefix: tuple[int, ...], n: int, r: int, a: int, i: int) -> None:
        paths.append(prefix)
        b = int(tables.best_b[n, r, a, i])
        subtrees = []
        while b > 0:
            m, j = int(tables.split_m[n, r, a, b, i]), int(tables.split_j[n, r, a, b, i])
            subtrees.append((b - 1, m, j))
            n, i, b = n - m, i - j - (1 if b == 1 else 0), b - 1
        for rank, m, j in reversed(subtrees):
            build(prefix + (rank,), m, r - 1, min(a + 1, tables.rows - 1), j)

    build((), n, levels, 0, internal)
    return paths


@dataclass(frozen=True)
class InternalCountTrees:
    """G*(n, d, i): the best expected tokens of a tree with n nodes, at most d levels and exactly i internal
    nodes, for every n <= budget, d <= levels, i <= max_internal, from one DP; `tree` rebuilds any of them."""

    matrix: np.ndarray
    tables: _InternalTables
    levels: int

    def value(self, n: int, depth: int, internal: int) -> float:
        return float(self.tables.best[n, depth, 0, internal])

    def values(self, depth: int) -> np.ndarray:
        """[budget+1, I+1] G* for this depth limit (-inf where no tree fits)."""
        return self.tables.best[:, depth, 0, :]

    def tree(self, n: int, depth: int, internal: int, provenance: Mapping | None = None) -> TreeShape:
        if not np.isfinite(self.value(n, depth, internal)):
            raise ConfigError(f"no tree of {n} nodes, {depth} levels and {internal} internal nodes")
        return TreeShape.from_paths(_rebuild_internal(self.tables, n, depth, internal), dict(provenance or {}))


def internal_count_trees(accept: Sequence[float] | np.ndarray, budget: int, max_depth: int,
                         max_internal: int = 20) -> InternalCountTrees:
    """Solve the internal-node-count DP once for all n <= budget and depth limits <= max_depth."""
    levels = _validate_limits(budget, max_depth)
    matrix = as_acceptance(accept)
    i_max = max(0, min(int(max_internal), int(budget) - 1))
    return InternalCountTrees(matrix, _solve_internal(matrix, int(budget), levels, i_max), levels)
