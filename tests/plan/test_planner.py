"""The hardware-aware planner: every cost priced (t(n), c(w) by level width, overheads), against brute force."""

from functools import cache

import numpy as np
import pytest

from treespec.decode.tree import TreeShape, chain
from treespec.errors import ConfigError
from treespec.plan.costs import StepCosts, interpolate_latency
from treespec.plan.optimizer import expected_tokens, internal_count_trees, level_widths, optimal_values, sequoia_tree
from treespec.plan.planner import choose_tree_size, plan_tree

CPU_LIKE = {1: 1.0, 2: 1.22, 4: 1.34, 8: 1.82, 16: 1.98, 32: 2.31, 64: 3.25}


@cache
def _forests(nodes: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Every ordered forest of `nodes` nodes, as rank paths relative to the forest's parent."""
    if nodes == 0:
        return ((),)
    out = []
    for first in range(1, nodes + 1):
        for subtree in _forests(first - 1):  # the first tree: a root over a forest of first - 1 nodes
            for rest in _forests(nodes - first):
                shifted = [(p[0] + 1,) + p[1:] for p in rest]
                out.append(((0,),) + tuple((0,) + p for p in subtree) + tuple(shifted))
    return tuple(out)


def all_trees(nodes: int) -> list[TreeShape]:
    return [TreeShape.from_paths(((),) + forest) for forest in _forests(nodes - 1)]


def test_tree_enumeration_counts_ordered_trees():
    assert [len(all_trees(n)) for n in range(1, 7)] == [1, 1, 2, 5, 14, 42]  # Catalan numbers


def test_internal_count_dp_matches_brute_force():
    """Against every tree of up to 6 nodes whose ranks have P > 0 (a rank with P = 0 at every depth only adds cost)."""
    accept = [[0.55, 0.2, 0.1], [0.45, 0.25, 0.05]]
    trees = internal_count_trees(accept, 6, 6, max_internal=5)
    for n in range(1, 7):
        for depth in range(1, 7):
            for internal in range(6):
                fits = [t for t in all_trees(n) if t.levels <= depth and sum(level_widths(t)) == internal
                        and max(t.ranks) < 3]
                best = max((expected_tokens(t, accept) for t in fits), default=-np.inf)
                assert trees.value(n, depth, internal) == pytest.approx(best), (n, depth, internal)
                if fits:
                    built = trees.tree(n, depth, internal)
                    assert built.size == n and built.levels <= depth and sum(level_widths(built)) == internal
                    assert expected_tokens(built, accept) == pytest.approx(best)
    for depth in range(1, 7):  # the maximum over internal counts is Sequoia's optimum wherever both exist
        ours, sequoia = trees.values(depth)[1:].max(axis=1), optimal_values(accept, 6, depth)
        assert ours[np.isfinite(ours)] == pytest.approx(sequoia[np.isfinite(ours)])


@pytest.mark.parametrize("draft", [{1: 0.1}, {1: 0.05, 2: 0.15, 4: 0.35}, {1: 0.02, 8: 0.09}])
def test_plan_is_the_best_tree_by_brute_force(draft):
    """With affine draft costs the plan is optimal among all trees of up to 6 nodes."""
    accept = [0.6, 0.2, 0.1]
    costs = StepCosts({1: 1.0, 2: 1.05, 4: 1.1, 6: 1.3}, draft, overhead=0.03, baseline_overhead=0.01)
    plan = plan_tree(accept, costs, max_budget=6, max_depth_limit=6)
    brute = max(costs.speedup(t, accept) for n in range(1, 7) for t in all_trees(n))
    assert plan.predicted_speedup == pytest.approx(brute)
    assert costs.speedup(plan.tree, accept) == pytest.approx(plan.predicted_speedup)


def test_width_cost_changes_the_chosen_tree():
    accept = [0.5, 0.25, 0.1]
    flat = {1: 1.0, 64: 1.02}
    cheap = StepCosts(flat, {1: 0.05})  # every level costs the same, whatever its width
    steep = StepCosts(flat, {1: 0.05, 2: 0.3, 4: 0.8, 8: 1.8})  # a draft whose cost grows with the nodes it expands
    wide, narrow = plan_tree(accept, cheap, max_budget=16, max_depth_limit=8), plan_tree(accept, steep, max_budget=16,
                                                                                         max_depth_limit=8)
    assert max(level_widths(wide.tree)) > 1
    assert max(level_widths(narrow.tree)) == 1 and narrow.tree != wide.tree
    # each is the better one under its own costs
    assert steep.speedup(narrow.tree, accept) > steep.speedup(wide.tree, accept)
    assert cheap.speedup(wide.tree, accept) >= cheap.speedup(narrow.tree, accept)


def test_given_values_are_kept_and_the_rest_chosen():
    accept = [[0.47, 0.12, 0.05, 0.04], [0.46, 0.14, 0.05, 0.04], [0.38, 0.15, 0.07, 0.05]]
    costs = StepCosts(CPU_LIKE, {1: 0.066, 2: 0.07, 4: 0.08, 8: 0.11}, overhead=0.04, baseline_overhead=0.02)
    for budget in (4, 8, 16, 32):
        plan = plan_tree(accept, costs, budget=budget)
        assert plan.budget == budget and plan.given == {"budget": budget, "max_depth": None}
        assert plan.describe()["chosen"] == ["max_depth"]
        best_depth = max(range(2, 13), key=lambda d: costs.speedup(sequoia_tree(accept, budget, d), accept))
        assert plan.predicted_speedup >= costs.speedup(sequoia_tree(accept, budget, best_depth), accept) - 1e-9
    plan = plan_tree(accept, costs, max_depth=5)
    assert plan.depth <= 5 and plan.describe()["chosen"] == ["budget"]
    fixed = plan_tree(accept, costs, budget=8, max_depth=3)
    assert fixed.tree == sequoia_tree(accept, 8, 3) and fixed.describe()["chosen"] == []


def test_no_tree_when_drafting_does_not_pay():
    plan = plan_tree([0.3, 0.1], StepCosts(CPU_LIKE, {1: 0.9}))
    assert plan.budget == 1 and plan.predicted_speedup == pytest.approx(1.0)


def test_overheads_enter_the_prediction():
    tree = chain(2)
    costs = StepCosts({1: 1.0, 3: 1.2}, {1: 0.1}, overhead=0.2, baseline_overhead=0.1)
    assert costs.step(tree) == pytest.approx(1.2 + 2 * 0.1 + 0.2)
    assert costs.speedup(tree, [0.5]) == pytest.approx((1 + 0.5 + 0.25) * 1.1 / 1.6)
    assert costs.speedup(chain(0), [0.5]) == pytest.approx(1.0)


def test_choose_tree_size_is_the_constant_draft_cost_case():
    accept = [0.7, 0.15, 0.05]
    latency = {1: 1.0, 2: 1.56, 4: 1.67, 8: 1.88, 16: 2.16, 32: 2.98, 64: 4.4}
    choice = choose_tree_size(accept, latency, 0.1, max_budget=32, max_depth=8)
    brute = {}
    for n in range(1, 33):
        for d in range(1, min(n, 8) + 1):
            brute[n, d] = optimal_values(accept, n, d)[-1] / (interpolate_latency(latency, n) + (d - 1) * 0.1)
    best = max(brute.values())
    assert choice.predicted_speedup == pytest.approx(best)
    assert brute[choice.budget, choice.max_depth] == pytest.approx(best)
    assert choice.expected_tokens == pytest.approx(optimal_values(accept, choice.budget, choice.max_depth)[-1])
    flat = choose_tree_size(accept, {1: 1.0, 64: 1.0}, 0.0, max_budget=16, max_depth=16)
    assert flat.budget == 16  # free target passes and free drafting: bigger is better


def test_latency_interpolation_and_validation():
    assert interpolate_latency({1: 1.0, 4: 2.5}, 2) == pytest.approx(1.5)
    assert interpolate_latency({1: 1.0, 4: 2.5}, 8) == pytest.approx(4.5)
    with pytest.raises(ConfigError):
        interpolate_latency({}, 3)
    with pytest.raises(ConfigError, match="n = 1"):
        StepCosts({2: 1.0})
    with pytest.raises(ConfigError, match="draft costs"):
        StepCosts({1: 1.0}, {1: -0.1})
    with pytest.raises(ConfigError, match="budget"):
        plan_tree([0.5], StepCosts({1: 1.0}), budget=0)
    assert StepCosts({1: 1.0}, {1: 0.1, 2: 0.15, 4: 0.25}).affine_draft() == pytest.approx((0.05, 0.05))
