"""Sequoia's tree optimizer under its first name: see treespec.plan.optimizer."""

from treespec.plan.optimizer import (
    as_acceptance,
    expected_tokens,
    internal_count_trees,
    level_widths,
    node_probabilities,
    optimal_values,
    sequoia_tree,
)

__all__ = ["as_acceptance", "expected_tokens", "internal_count_trees", "level_widths", "node_probabilities",
           "optimal_values", "sequoia_tree"]
