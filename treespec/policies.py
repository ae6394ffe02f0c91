"""Tree policies under their first name: see treespec.drafters.policies."""

from treespec.drafters.policies import CHILDREN_MODES, Adaptive, Chain, Dynamic, KAry, Paths, Sequoia, Static, as_policy

__all__ = ["CHILDREN_MODES", "Adaptive", "Chain", "Dynamic", "KAry", "Paths", "Sequoia", "Static", "as_policy"]
