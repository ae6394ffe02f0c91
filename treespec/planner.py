"""Hardware-aware planning: the tree that maximises predicted tokens per second, every cost priced.

One decoding step costs, in units of the target's 1-token pass (t(1) = 1):

    step(tree) = t(n) + sum_l c(w_l) + o

t(n) is the target pass over the n tree tokens; the draft runs one forward per level l = 0 .. levels-2,
expanding the w_l nodes of depth l that have children (w_0 = 1, the root), at cost c(w) each; o is the
engine's own work per step (verification, commit, Python). A 1-token autoregressive step costs 1 + o_1.

    predicted speedup(tree) = G(tree) * (1 + o_1) / step(tree)      G = optimizer.expected_tokens

`plan_tree` fills in only what the caller left unset (budget, depth limit, or both) and returns the best
tree. Candidates come from the internal-node-count DP (`optimizer.internal_count_trees`): the best-G tree
for every (n nodes, d levels, i internal nodes). Under an affine fit c(w) ~ c0 + c1 * w the draft cost of
such a tree is (levels - 1) * c0 + c1 * i, so that fit ranks all candidates; the best ones are rebuilt
and priced exactly with the measured c(w). A one-node tree (no speculation, speedup 1) is a candidate too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from treespec.errors import ConfigError
from treespec.optimizer import (
    as_acceptance,
    expected_tokens,
    internal_count_trees,
    level_widths,
    optimal_values,
    sequoia_tree,
)
from treespec.tree import TreeShape, chain


def interpolate_latency(relative_latency: Mapping[int, float], n: int) -> float:
    """t(n) from measured points (n -> pass time / 1-token pass time), linear between them and beyond."""
    points = sorted((int(k), float(v)) for k, v in relative_latency.items())
    if not points:
        raise ConfigError("the latency profile has no measured points")
    sizes = np.array([p[0] for p in points], dtype=np.float64)
    times = np.array([p[1] for p in points], dtype=np.float64)
    if n > sizes[-1]:
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]) if len(points) > 1 else 0.0
        return float(times[-1] + slope * (n - sizes[-1]))
    return float(np.interp(n, sizes, times))


@dataclass(frozen=True)
class StepCosts:
    """What the parts of one step cost, relative to the target's 1-token pass (see module docstring)."""

    target: Mapping[int, float]  # t(n), with t(1) = 1
    draft: Mapping[int, float] = field(default_factory=lambda: {1: 0.0})  # c(w): a draft forward over w nodes
    overhead: float = 0.0  # o: engine work per speculative step
    baseline_overhead: float = 0.0  # o_1: engine work per autoregressive step

    def __post_init__(self):
        if not self.target or 1 not in {int(k) for k in self.target}:
            raise ConfigError("step costs need t(n) measured at n = 1")
        if not self.draft or min(float(v) for v in self.draft.values()) < 0:
            raise ConfigError(f"draft costs c(w) must be given and >= 0, got {dict(self.draft)}")
        if self.overhead < 0 or self.baseline_overhead < 0:
            raise ConfigError("per-step overheads must be >= 0")

    def target_cost(self, n: int) -> float:
        return interpolate_latency(self.target, n)

    def draft_cost(self, width: int) -> float:
        """c(w), interpolated between measured widths (constant beyond a single measured point)."""
        return 0.0 if width <= 0 else max(0.0, interpolate_latency(self.draft, width))

    def affine_draft(self) -> tuple[float, float]:
        """(c0, c1), both >= 0, with c(w) ~ c0 + c1 * w fitted to the measured widths up to 16."""
        points = sorted((int(w), float(c)) for w, c in self.draft.items() if int(w) <= 16)
        if len(points) < 2:
            return float(points[0][1]) if points else 0.0, 0.0
        widths, costs = np.array(points).T
        slope, intercept = np.polyfit(widths, costs, 1)
        if intercept < 0:
            return 0.0, float(np.dot(widths, costs) / np.dot(widths, widths))
        if slope < 0:
            return float(costs.mean()), 0.0
        return float(intercept), float(slope)

    def step(self, tree: TreeShape) -> float:
        """The predicted cost of one step drafting and verifying `tree`."""
        if tree.size == 1:
            return self.target_cost(1) + self.baseline_overhead
        return self.target_cost(tree.size) + sum(self.draft_cost(w) for w in level_widths(tree)) + self.overhead

    def speedup(self, tree: TreeShape, accept) -> float:
        """Predicted tokens per second relative to autoregressive decoding with the same target."""
        gain = expected_tokens(tree, accept) if tree.size > 1 else 1.0
        return gain * (self.target_cost(1) + self.baseline_overhead) / self.step(tree)


@dataclass(frozen=True)
class Plan:
    """The tree a hardware-aware choice settled on, and why."""

    tree: TreeShape
    expected_tokens: float  # G: predicted tokens per pass
    predicted_speedup: float
    step_cost: float  # predicted step time / 1-token target pass
    given: dict[str, Any]  # the values the caller set: {"budget": n or None, "max_depth": d or None}
    table: dict[tuple[int, int], float]  # (budget, depth limit) -> best predicted speedup (affine draft-cost fit)

    @property
    def budget(self) -> int:
        return self.tree.size

    @property
    def depth(self) -> int:
        return self.tree.levels

    def describe(self) -> dict[str, Any]:
        return {"budget": self.budget, "depth": self.depth, "given": {k: v for k, v in self.given.items() if v},
                "chosen": [k for k, v in self.given.items() if v is None],
                "predicted_accepted": round(self.expected_tokens, 4),
                "predicted_speedup": round(self.predicted_speedup, 4), "widths": list(level_widths(self.tree))}


def plan_tree(
    accept: Sequence[float] | np.ndarray,
    costs: StepCosts,
    *,
    budget: int | None = None,
    max_depth: int | None = None,
    max_budget: int = 64,
    max_depth_limit: int = 12,
    max_internal: int = 12,
    shortlist: int = 24,
) -> Plan:
    """The tree with the best predicted speedup; a given budget or depth limit is kept as given.

    budget and max_depth both given: Sequoia's max-G tree of exactly that size and depth limit, priced.
    One given: the best value of the other (depth limit 1..max_depth_limit, or budget 1..max_budget).
    Neither: both chosen. The trees are the internal-count DP's (see module docstring).
    """
    matrix = as_acceptance(accept)
    given = {"budget": budget, "max_depth": max_depth}
    for name, value in given.items():
        if value is not None and (int(value) != value or value < 1):
            raise ConfigError(f"tree {name} must be an integer >= 1, got {value}")
    if budget is not None and max_depth is not None:
        tree = sequoia_tree(matrix, int(budget), int(max_depth))
        return Plan(tree, expected_tokens(tree, matrix), costs.speedup(tree, matrix), costs.step(tree), given,
                    {(tree.size, int(max_depth)): costs.speedup(tree, matrix)})
    sizes = [int(budget)] if budget is not None else list(range(1, int(max_budget) + 1))
    depths = [int(max_depth)] if max_depth is not None else list(range(1, int(max_depth_limit) + 1))
    depths = sorted({min(d, max(sizes)) for d in depths})  # a tree of n nodes has at most n levels
    trees = internal_count_trees(matrix, max(sizes), max(depths), max_internal)
    c0, c1 = costs.affine_draft()
    base = costs.target_cost(1) + costs.baseline_overhead
    internal = np.arange(trees.tables.best.shape[3])
    scored: list[tuple[float, int, int, int]] = []  # (surrogate speedup, n, d, i)
    table: dict[tuple[int, int], float] = {}
    for depth in depths:
        values = trees.values(depth)  # [n, i]
        for n in sizes:
            if n == 1:
                table[1, depth] = 1.0
                continue
            if depth == 1:
                continue
            row = values[n]
            cost = costs.target_cost(n) + costs.overhead + (depth - 1) * c0 + c1 * internal
            surrogate = np.where(np.isfinite(row), row * base / cost, -np.inf)
            if np.isfinite(surrogate).any():
                table[n, depth] = float(surrogate.max())
                scored += [(float(surrogate[i]), n, depth, int(i)) for i in np.nonzero(np.isfinite(surrogate))[0]]
    if not table:
        raise ConfigError(f"no tree fits budget {budget} and max_depth {max_depth}")
    candidates: list[TreeShape] = [chain(0)] if 1 in sizes else []
    for _, n, depth, i in sorted(scored, key=lambda s: (-s[0], s[1], s[2]))[:shortlist]:
        candidates.append(trees.tree(n, depth, i))
    candidates += _unconstrained_candidates(matrix, costs, sizes, depths, per_depth=2)
    best = max(candidates, key=lambda t: (costs.speedup(t, matrix), -t.size, -t.levels))
    provenance = {"policy": "sequoia", "budget": best.size, "max_depth": best.levels,
                  "acceptance": matrix.tolist() if matrix.shape[0] > 1 else matrix[0].tolist(),
                  "expected_tokens": expected_tokens(best, matrix) if best.size > 1 else 1.0, "hardware_aware": True}
    best = TreeShape(best.parents, provenance)
    gain = provenance["expected_tokens"]
    return Plan(best, gain, costs.speedup(best, matrix), costs.step(best), given, table)


def _unconstrained_candidates(matrix: np.ndarray, costs: StepCosts, sizes: list[int], depths: list[int],
                              per_depth: int) -> list[TreeShape]:
    """Sequoia's max-G trees (any number of internal nodes) for the sizes that look best at each depth limit:
    they cover large trees beyond the internal-count DP's range (a GPU's flat t(n))."""
    out = []
    c1 = costs.draft_cost(1)
    for depth in depths:
        if depth < 2:
            continue
        values = optimal_values(matrix, max(sizes), depth)  # [n - 1]
        scored = [(values[n - 1] / (costs.target_cost(n) + costs.overhead + (depth - 1) * c1), n)
                  for n in sizes if n >= 2 and np.isfinite(values[n - 1])]
        for _, n in sorted(scored, reverse=True)[:per_depth]:
            out.append(sequoia_tree(matrix, n, depth))
    return out


@dataclass(frozen=True)
class HardwareChoice:
    """The (budget, depth) with the best predicted speedup under a constant draft cost per level."""

    budget: int
    max_depth: int
    expected_tokens: float
    predicted_speedup: float
    table: dict[tuple[int, int], float]  # (budget, depth) -> predicted speedup


def choose_tree_size(
    accept: Sequence[float] | np.ndarray,
    relative_latency: Mapping[int, float],
    draft_cost: float,
    *,
    max_budget: int = 64,
    max_depth: int = 12,
) -> HardwareChoice:
    """`plan_tree` with t(n) and one draft cost c per level, whatever its width, and no overheads:
    G(tree) / (t(n) + (levels - 1) * c) over budgets 1..max_budget and depth limits 1..max_depth."""
    if draft_cost < 0:
        raise ConfigError(f"draft cost c must be >= 0, got {draft_cost}")
    plan = plan_tree(accept, StepCosts(relative_latency, {1: float(draft_cost)}), max_budget=max_budget,
                     max_depth_limit=max_depth)
    return HardwareChoice(plan.budget, plan.depth, plan.expected_tokens, plan.predicted_speedup, plan.table)
