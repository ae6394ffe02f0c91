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

from treespec.errors import ConfigError
from treespec.tree import TreeShape


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


@dataclass(frozen=True)
class HardwareChoice:
    """The (budget, depth) maximising predicted speedup G(n, d) / (t(n) + (d - 1) * c)."""

    budget: int
    max_depth: int
    expected_tokens: float
    predicted_speedup: float
    table: dict[tuple[int, int], float]  # (budget, depth) -> predicted speedup


def interpolate_latency(relative_latency: Mapping[int, float], n: int) -> float:
    """t(n) from measured points (n -> pass time / 1-token pass time), linear between them."""
    points = sorted((int(k), float(v)) for k, v in relative_latency.items())
    if not points:
        raise ConfigError("the latency profile has no measured points")
    sizes = np.array([p[0] for p in points], dtype=np.float64)
    times = np.array([p[1] for p in points], dtype=np.float64)
    if n > sizes[-1]:
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]) if len(points) > 1 else 0.0
        return float(times[-1] + slope * (n - sizes[-1]))
    return float(np.interp(n, sizes, times))


def choose_tree_size(
    accept: Sequence[float] | np.ndarray,
    relative_latency: Mapping[int, float],
    draft_cost: float,
    *,
    max_budget: int = 64,
    max_depth: int = 12,
) -> HardwareChoice:
    """Search budgets 1..max_budget and depth limits 1..max_depth for the best predicted speedup.

    `relative_latency` maps n to t(n) (target pass over n tree tokens / 1-token pass); `draft_cost` is c,
    one draft step / 1-token target pass. A tree with d levels costs d - 1 draft steps.
    """
    if draft_cost < 0:
        raise ConfigError(f"draft cost c must be >= 0, got {draft_cost}")
    matrix = as_acceptance(accept)
    table: dict[tuple[int, int], float] = {}
    gains: dict[tuple[int, int], float] = {}
    for depth in range(1, max_depth + 1):
        values = optimal_values(matrix, max_budget, depth)
        for n in range(1, max_budget + 1):
            if depth > n or not np.isfinite(values[n - 1]):
                continue
            gains[n, depth] = float(values[n - 1])
            table[n, depth] = gains[n, depth] / (interpolate_latency(relative_latency, n) + (depth - 1) * draft_cost)
    best = max(table, key=lambda key: (table[key], -key[0], -key[1]))
    return HardwareChoice(best[0], best[1], gains[best], table[best], table)
