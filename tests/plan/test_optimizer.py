"""Sequoia's DP against brute force, expected tokens and validation (the hardware-aware choice: test_planner.py)."""

from functools import cache

import numpy as np
import pytest

from treespec.decode.tree import TreeShape, chain
from treespec.errors import ConfigError
from treespec.plan.optimizer import (
    expected_tokens,
    node_probabilities,
    optimal_values,
    sequoia_tree,
)


@cache
def forests(n: int, max_children: int, levels: int) -> tuple[tuple, ...]:
    """All ordered forests of n nodes (each a tuple of trees, a tree a tuple of child trees)."""
    if n == 0:
        return ((),)
    if levels == 0 or max_children == 0:
        return ()
    out = []
    for first in range(1, n + 1):  # size of the first tree
        for head in trees(first, max_children, levels):
            for rest in forests(n - first, max_children - 1, levels):
                out.append((head,) + rest)
    return tuple(out)


@cache
def trees(n: int, max_children: int, levels: int) -> tuple[tuple, ...]:
    return tuple(forests(n - 1, max_children, levels - 1)) if levels >= 1 else ()


def to_shape(tree) -> TreeShape:
    paths = []

    def walk(node, prefix):
        paths.append(prefix)
        for rank, child in enumerate(node):
            walk(child, prefix + (rank,))

    walk(tree, ())
    return TreeShape.from_paths(paths)


def brute_force(accept, n, levels):
    return max(expected_tokens(to_shape(t), accept) for t in trees(n, n, levels))


VECTORS = [[0.6, 0.2, 0.1], [0.3, 0.25, 0.2, 0.15], [0.9], [0.5, 0.5], [0.1, 0.4, 0.3]]


@pytest.mark.parametrize("accept", VECTORS)
@pytest.mark.parametrize("levels", [1, 2, 3, 9])
def test_dp_equals_brute_force(accept, levels):
    for n in range(1, 10) if levels > 1 else [1]:
        tree = sequoia_tree(accept, n, levels)
        assert tree.size == n and tree.levels <= levels
        best = brute_force(accept, n, levels)
        assert expected_tokens(tree, accept) == pytest.approx(best, abs=1e-12)
        assert tree.provenance["expected_tokens"] == pytest.approx(best, abs=1e-12)


def test_dp_with_depth_resolved_matrix_equals_brute_force():
    matrix = [[0.7, 0.2], [0.5, 0.3], [0.2, 0.1]]  # P_k for children at depth 1, 2, 3+
    for n in range(1, 10):
        for levels in (2, 4, 9):
            tree = sequoia_tree(matrix, n, levels)
            assert expected_tokens(tree, matrix) == pytest.approx(brute_force(matrix, n, levels), abs=1e-12)


def test_expected_tokens_by_hand():
    accept = [0.6, 0.3]
    tree = TreeShape((-1, 0, 0, 1))  # root, two children, a grandchild under rank 1
    assert node_probabilities(tree, accept).tolist() == pytest.approx([1, 0.6, 0.3, 0.36])
    assert expected_tokens(tree, accept) == pytest.approx(2.26)
    assert expected_tokens(chain(3), [0.5]) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(TreeShape((-1, 0, 0)), [0.5]) == pytest.approx(1.5)  # rank 2 beyond K: f = 0


def test_greedy_frontier_matches_dp_for_non_increasing_p():
    accept = [0.5, 0.25, 0.12, 0.06]
    for n in range(1, 10):
        total, frontier = 1.0, [(accept[0], (0,))]
        for _ in range(n - 1):  # add the frontier node with the largest f: a first child or a next sibling
            frontier.sort(reverse=True)
            f, path = frontier.pop(0)
            total += f
            frontier.append((f * accept[0], path + (0,)))
            rank = path[-1]
            if rank + 1 < len(accept):
                frontier.append((f / accept[rank] * accept[rank + 1], path[:-1] + (rank + 1,)))
        assert optimal_values(accept, n)[-1] == pytest.approx(total)


def test_optimal_values_are_monotone():
    values = optimal_values([0.6, 0.2, 0.1], 32, 6)
    assert values[0] == 1 and np.all(np.diff(values) >= -1e-12)


@pytest.mark.parametrize(
    "accept, budget, depth, message",
    [
        ([0.5, -0.1], 8, None, ">= 0"),
        ([0.8, 0.3], 8, None, "at most 1"),
        ([], 8, None, "non-empty"),
        ([0.5], 0, None, "budget"),
        ([0.5], 4, 0, "max_depth"),
        ([0.5], 4, 1, "max_depth >= 2"),
        ([0.5], 2.5, None, "budget"),
    ],
)
def test_bad_arguments(accept, budget, depth, message):
    with pytest.raises(ConfigError, match=message):
        sequoia_tree(accept, budget, depth)
