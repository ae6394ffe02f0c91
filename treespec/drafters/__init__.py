"""Drafters and tree policies: what proposes each row's token tree, for B >= 1 rows.

    slots       the cache-slot bookkeeping every model-backed drafter shares (right-padded rows), written once
    causal_lm   `CausalLMDrafter`: any causal LM sharing the target's tokenizer (vocabulary subsets, 4-bit weights)
    eagle       `EagleDrafter`: an EAGLE-style head reading the target's features
    medusa      `MedusaDrafter`: Medusa heads on the target's last hidden state (one head per tree level)
    policies    Static (Chain, KAry, Paths, Sequoia), Dynamic and Adaptive trees over rows
    layer_skip  `LayerSkipDrafter`: the target itself with some layers skipped (self-speculation, no draft model)
    ngram       `NGramDrafter`: prompt lookup, candidates from each row's own text (no model)
    lookahead   `LookaheadDrafter`: lookahead decoding, an n-gram pool from the target's Jacobi window (no model)
    sources     `NGram`, `Lookahead` and `Hybrid` trees (model and n-gram branches under one planned budget), `HybridDrafter`
    vocab       draft vocabulary subsets (token counts, the most frequent ids)

A drafter implements `treespec.decode.engine.Drafter`; `make_drafter` picks the one a draft model needs,
`drafter_for` the one a policy needs (a model drafter, an n-gram drafter, both, or none). May import
`treespec.errors`, `treespec.models`, `treespec.decode` and the pure tree math of `treespec.plan.optimizer`.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from treespec.decode.engine import Drafter
from treespec.drafters.causal_lm import CausalLMDrafter
from treespec.drafters.eagle import EagleDrafter
from treespec.drafters.layer_skip import LayerSkipDrafter
from treespec.drafters.lookahead import LookaheadDrafter
from treespec.drafters.medusa import MedusaDrafter
from treespec.drafters.ngram import NGramDrafter
from treespec.drafters.policies import policy_sources
from treespec.drafters.sources import CANDIDATE_SOURCES, HybridDrafter
from treespec.errors import ConfigError
from treespec.models.eagle_head import EagleDraftModel
from treespec.models.layer_skip import LayerSkip
from treespec.models.medusa_head import MedusaHeads


def make_drafter(draft: PreTrainedModel | LayerSkip, target: PreTrainedModel, max_length: int,
                 vocab: torch.Tensor | None = None) -> Drafter:
    """The drafter for a draft model: an EAGLE head reads the target's features, a `LayerSkip` runs the target
    itself, Medusa heads read its last hidden state, anything else is a causal LM; a causal LM or Medusa heads
    propose only from the token ids `vocab` [S] when given (see `treespec.drafters.vocab`)."""
    if isinstance(draft, LayerSkip):
        if vocab is not None:
            raise ConfigError("a draft vocabulary subset is implemented for causal-LM drafts, not layer skipping")
        return LayerSkipDrafter(draft, target, max_length)
    if isinstance(draft, MedusaHeads):  # Medusa heads read the target's last hidden state (and its LM head's rows)
        return MedusaDrafter(draft, target, vocab)
    if isinstance(draft, EagleDraftModel):
        if vocab is not None:
            raise ConfigError("a draft vocabulary subset is implemented for causal-LM drafts, not the EAGLE head")
        return EagleDrafter(draft, target, max_length)
    return CausalLMDrafter(draft, max_length, vocab)


def drafter_for(policy, draft: PreTrainedModel | None, target: PreTrainedModel, max_length: int,
                vocab: torch.Tensor | None = None) -> Drafter | None:
    """The drafter `policy` drafts from (treespec.drafters.policies.policy_sources): the draft model's, an n-gram
    drafter, both (`HybridDrafter`), or None for a one-node tree."""
    sources = policy_sources(policy)
    model = make_drafter(draft, target, max_length, vocab) if "model" in sources else None
    ngram = policy.new_ngram_drafter() if CANDIDATE_SOURCES & set(sources) else None
    if model is not None and ngram is not None:
        return HybridDrafter(model, ngram)
    return model if model is not None else ngram


__all__ = ["CausalLMDrafter", "Drafter", "EagleDrafter", "HybridDrafter", "LayerSkipDrafter", "LookaheadDrafter",
           "MedusaDrafter", "NGramDrafter", "drafter_for", "make_drafter"]
