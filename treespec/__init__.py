"""treespec: lossless tree-based speculative decoding for Hugging Face causal LMs.

    from treespec import generate, autoregressive, policies, sequoia_tree
    out = generate(target, draft, input_ids, tree=sequoia_tree([0.6, 0.15, 0.05], budget=8), max_new_tokens=64)
"""

from treespec import policies
from treespec.batch import generate_batch
from treespec.engine import Generation, StepStats, autoregressive, generate
from treespec.errors import ConfigError, MissingAssetError, TreespecError
from treespec.optimizer import expected_tokens, sequoia_tree
from treespec.planner import StepCosts, choose_tree_size, plan_tree
from treespec.training import draft_model as _draft_model  # noqa: F401  (registers the draft architecture)
from treespec.tree import TreeShape

__all__ = [
    "ConfigError",
    "Generation",
    "MissingAssetError",
    "StepCosts",
    "StepStats",
    "TreeShape",
    "TreespecError",
    "autoregressive",
    "choose_tree_size",
    "expected_tokens",
    "generate",
    "generate_batch",
    "plan_tree",
    "policies",
    "sequoia_tree",
]
