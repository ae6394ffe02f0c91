"""treespec: lossless tree-based speculative decoding for Hugging Face causal LMs.

    import treespec
    from treespec import policies
    out = treespec.generate(target, draft, input_ids, tree=policies.Dynamic(budget=6, depth=4, topk=3),
                            max_new_tokens=64)
    outs = treespec.generate_batch(target, draft, [ids_a, ids_b], tree=treespec.sequoia_tree([0.6, 0.15], budget=8),
                                   max_new_tokens=64)

The package by concern (imports run one way, top to bottom; nothing in the core imports `training` or `app`):

    app        configs, the command line, the session helper (pair -> hardware -> policy), the demo
    eval       prompt sets, the corpus, the losslessness certificate, benchmark runs, reports
    plan       acceptance, Sequoia's optimizer, costs t(B, n) and c_B(w), the planner, hardware profiles
    api        generate, generate_batch, autoregressive
    drafters   the drafters (causal LM, EAGLE head) and tree policies, for B >= 1 rows
    decode     the one engine (B >= 1 rows) and its pure tensor functions: tree, mask, verify, sampling, cache
    models     loading (offline), architectures, the lean decoder, attention, weight layouts, quantization
    training   self-distillation of drafts; imports the rest, never imported by it
"""

from treespec import policies
from treespec.api import Generation, StepStats, autoregressive, generate, generate_batch
from treespec.errors import ConfigError, MissingAssetError, TreespecError
from treespec.plan.costs import StepCosts
from treespec.plan.optimizer import expected_tokens, sequoia_tree
from treespec.plan.planner import choose_tree_size, plan_tree
from treespec.tree import TreeShape


def load_pair(target=None, draft="default", *, hardware="auto", **options):
    """The default pair (or `target` / `draft` by built-in name or directory), checked to share a tokenizer and tuned
    to this machine: the dtype and weight layouts measured fastest here (hardware="auto": measured on first use,
    then cached), the profile in `.hardware`, its costs in `.costs`, and `.encode(text)` for prompts.
    hardware="none" keeps the models as loaded. Options: device, dtype, layout, attn_implementation, progress
    (treespec.app.configs.load_pair)."""
    from treespec.app.configs import load_pair as load

    return load(target, draft, hardware=hardware, **options)


def default_tree(pair, *, temperature=0.0, top_p=1.0, top_k=0):
    """The tree policy `python -m treespec.generate` drafts with for `pair` (from `load_pair`, tuned: the default
    pair's is the head's tree planned on this machine's profile plus prompt lookup), for decoding at this
    temperature / top-p / top-k. A pair without a model config in conf/model (no measured acceptance) gets a
    ConfigError that says what to do instead."""
    from treespec.app.session import default_tree as build
    from treespec.decode.sampling import SamplingConfig

    return build(pair, SamplingConfig(temperature=temperature, top_p=top_p, top_k=top_k)).policy


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
    "default_tree",
    "expected_tokens",
    "generate",
    "generate_batch",
    "load_pair",
    "plan_tree",
    "policies",
    "sequoia_tree",
]
