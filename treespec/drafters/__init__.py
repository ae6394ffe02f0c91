"""Drafters and tree policies: what proposes each row's token tree, for B >= 1 rows.

    slots       the cache-slot bookkeeping every model-backed drafter shares (right-padded rows), written once
    causal_lm   `CausalLMDrafter`: any causal LM sharing the target's tokenizer (vocabulary subsets, 4-bit weights)
    eagle       `EagleDrafter`: an EAGLE-style head reading the target's features
    policies    Static (Chain, KAry, Paths, Sequoia), Dynamic and Adaptive trees over rows
    vocab       draft vocabulary subsets (token counts, the most frequent ids)

A drafter implements `treespec.decode.engine.Drafter`; `make_drafter` picks the one a draft model needs. May import
`treespec.errors`, `treespec.models`, `treespec.decode` and the pure tree math of `treespec.plan.optimizer`.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from treespec.decode.engine import Drafter
from treespec.drafters.causal_lm import CausalLMDrafter
from treespec.drafters.eagle import EagleDrafter
from treespec.errors import ConfigError
from treespec.models.eagle_head import EagleDraftModel


def make_drafter(draft: PreTrainedModel, target: PreTrainedModel, max_length: int,
                 vocab: torch.Tensor | None = None) -> Drafter:
    """The drafter for a draft model: an EAGLE head reads the target's features, anything else is a causal LM
    (proposing only from the token ids `vocab` [S] when given; see `treespec.drafters.vocab`)."""
    if isinstance(draft, EagleDraftModel):
        if vocab is not None:
            raise ConfigError("a draft vocabulary subset is implemented for causal-LM drafts, not the EAGLE head")
        return EagleDrafter(draft, target, max_length)
    return CausalLMDrafter(draft, max_length, vocab)


__all__ = ["CausalLMDrafter", "Drafter", "EagleDrafter", "make_drafter"]
