"""Tree policies under their first name: see treespec.drafters.policies and treespec.drafters.sources."""

from treespec.drafters.policies import CHILDREN_MODES, Adaptive, Chain, Dynamic, KAry, Paths, Sequoia, Static, as_policy
from treespec.drafters.sources import Hybrid, Lookahead, NGram

__all__ = ["CHILDREN_MODES", "Adaptive", "Chain", "Dynamic", "Hybrid", "KAry", "Lookahead", "NGram", "Paths", "Sequoia",
           "Static", "as_policy"]
