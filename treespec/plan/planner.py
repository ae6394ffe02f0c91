"""Hardware-aware planning: the tree that maximises predicted tokens per second, every cost priced, at any B.

One decoding step of B rows costs, in units of the B-row 1-token target pass (`StepCosts` at B, from a measured
`LatencyProfile`):

    step(tree) = t(B, n) + sum_l c_B(w_l) + o_B          a one-node (autoregressive) step: 1 + o_B,1

    predicted speedup(tree) = G(tree) * (1 + o_B,1) / step(tree)      G = optimizer.expected_tokens

`plan_tree(accept, costs)` fills in only what the caller left unset (budget, depth limit, or both) and returns the
best tree; a one-node tree (no speculation, speedup 1) is a candidate, so where no tree pays at some B the plan is
batched autoregressive decoding. As B grows the target's pass stops being free (t(B, n) rises sooner), so the best
tree shrinks. Candidates come from the internal-node-count DP (`optimizer.internal_count_trees`): the best-G tree
for every (n nodes, d levels, i internal nodes). Under an affine fit c(w) ~ c0 + c1 * w the draft cost of such a
tree is (levels - 1) * c0 + c1 * i, so that fit ranks all candidates; the best ones are rebuilt and priced exactly
with the measured c(w).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treespec.decode.tree import TreeShape, chain
from treespec.errors import ConfigError
from treespec.plan.costs import StepCosts
from treespec.plan.optimizer import (
    as_acceptance,
    expected_tokens,
    internal_count_trees,
    level_widths,
    optimal_values,
    sequoia_tree,
)


@dataclass(frozen=True)
class Plan:
    """The tree a hardware-aware choice settled on, and why."""

    tree: TreeShape
    expected_tokens: float  # G: predicted tokens per pass (per row)
    predicted_speedup: float  # over autoregressive decoding at the same batch size
    step_cost: float  # predicted step time / the B-row 1-token pass
    given: dict[str, Any]  # the values the caller set: {"budget": n or None, "max_depth": d or None}
    table: dict[tuple[int, int], float]  # (budget, depth limit) -> best predicted speedup (affine draft-cost fit)
    batch_size: int = 1
    pass_ms: float | None = None  # the B-row 1-token pass, when the costs knew it

    @property
    def budget(self) -> int:
        return self.tree.size

    @property
    def depth(self) -> int:
        return self.tree.levels

    @property
    def speculates(self) -> bool:
        """False where the plan fell back to a one-node tree (speculation does not pay)."""
        return self.tree.size > 1

    @property
    def predicted_tokens_per_second(self) -> float | None:
        """All rows together: B * G / (t_B(1) * step(tree)); None without the pass time."""
        if self.pass_ms is None:
            return None
        return 1000 * self.batch_size * self.expected_tokens / (self.pass_ms * self.step_cost)

    @property
    def baseline_tokens_per_second(self) -> float | None:
        """Autoregressive decoding at this B, predicted: B / (t_B(1) * (1 + o_B,1))."""
        rate = self.predicted_tokens_per_second
        return None if rate is None else rate / self.predicted_speedup

    def describe(self) -> dict[str, Any]:
        out = {"budget": self.budget, "depth": self.depth, "given": {k: v for k, v in self.given.items() if v},
               "chosen": [k for k, v in self.given.items() if v is None],
               "predicted_accepted": round(self.expected_tokens, 4),
               "predicted_speedup": round(self.predicted_speedup, 4), "widths": list(level_widths(self.tree)),
               "batch_size": self.batch_size, "speculates": self.speculates}
        if self.pass_ms is not None:
            out.update(pass_ms=round(self.pass_ms, 4),
                       predicted_tokens_per_second=round(self.predicted_tokens_per_second, 3),
                       predicted_autoregressive_tokens_per_second=round(self.baseline_tokens_per_second, 3))
        return out


def plan_tree(
    accept: Sequence[float] | np.ndarray,
    costs: StepCosts,
    *,
    budget: int | None = None,
    max_depth: int | None = None,
    max_budget: int | None = None,
    max_depth_limit: int | None = None,
    max_internal: int = 12,
    shortlist: int = 24,
) -> Plan:
    """The tree with the best predicted speedup at the costs' batch size; a given budget or depth limit is kept.

    budget and max_depth both given: Sequoia's max-G tree of exactly that size and depth limit, priced.
    One given: the best value of the other (depth limit 1..max_depth_limit, or budget 1..max_budget). Neither: both
    chosen. max_budget defaults to the largest tree size measured (at most 64), max_depth_limit to
    min(12, max_budget). The trees are the internal-count DP's (see the module docstring).
    """
    matrix = as_acceptance(accept)
    given = {"budget": budget, "max_depth": max_depth}
    for name, value in given.items():
        if value is not None and (int(value) != value or value < 1):
            raise ConfigError(f"tree {name} must be an integer >= 1, got {value}")
    extra = {"batch_size": costs.batch_size, "pass_ms": costs.pass_ms}
    if budget is not None and max_depth is not None:
        tree = sequoia_tree(matrix, int(budget), int(max_depth))
        return Plan(tree, expected_tokens(tree, matrix), costs.speedup(tree, matrix), costs.step(tree), given,
                    {(tree.size, int(max_depth)): costs.speedup(tree, matrix)}, **extra)
    max_budget = int(max_budget) if max_budget is not None else min(64, costs.max_size)
    max_depth_limit = int(max_depth_limit) if max_depth_limit is not None else min(12, max_budget)
    sizes = [int(budget)] if budget is not None else list(range(1, max_budget + 1))
    depths = [int(max_depth)] if max_depth is not None else list(range(1, max_depth_limit + 1))
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
                  "expected_tokens": expected_tokens(best, matrix) if best.size > 1 else 1.0, "hardware_aware": True,
                  "batch_size": costs.batch_size}
    best = TreeShape(best.parents, provenance)
    return Plan(best, provenance["expected_tokens"], costs.speedup(best, matrix), costs.step(best), given, table,
                **extra)


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


def format_plans(plans: Sequence[Plan]) -> str:
    """A fixed-width text table of plans, one per batch size: B, the tree, predicted tokens per pass, speedup over
    autoregressive decoding at that B, and predicted tokens/s."""
    header = ("B", "tree", "widths", "pred. tok/pass", "pred. vs AR", "pred. tok/s", "pred. AR tok/s")
    lines = [header]

    def rate(value):
        return "-" if value is None else f"{value:.1f}"

    for plan in plans:
        tree = f"n={plan.budget} d={plan.depth}" if plan.speculates else "none (autoregressive)"
        widths = " ".join(map(str, level_widths(plan.tree))) if plan.speculates else "1"
        lines.append((str(plan.batch_size), tree, widths, f"{plan.expected_tokens:.2f}",
                      f"{plan.predicted_speedup:.2f}x", rate(plan.predicted_tokens_per_second),
                      rate(plan.baseline_tokens_per_second)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


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
