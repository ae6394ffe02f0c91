"""The drafter of a layer-skip self-draft (treespec.models.layer_skip) for B >= 1 rows.

It is a causal-LM drafter (treespec.drafters.causal_lm: the same cache-slot bookkeeping, pending tokens and
vocabulary handling) whose model is the target itself, run through the target's lean decoder over the layers the
`LayerSkip` keeps, with a KV cache of those layers only; logits come from the target's final norm and LM head.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.cache import new_cache
from treespec.drafters.causal_lm import CausalLMDrafter
from treespec.models.layer_skip import LayerSkip
from treespec.models.lean import lean_decoder


class LayerSkipDrafter(CausalLMDrafter):
    """`target` drafting for itself with the layers `draft.skip` skipped."""

    def __init__(self, draft: LayerSkip, target: PreTrainedModel, max_length: int):
        draft.check(target)
        super().__init__(target, max_length, vocab=None, lean=True)
        self.layers = draft.layers

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        self.lean = lean_decoder(self.model)  # the target's current modules (a layout change rebuilds it)
        self.cache = new_cache(self.model, self.max_length, layers=len(self.layers))
        self._begin(len(prompts))
        self.pending = [[int(t) for t in p[:-1]] for p in prompts]

    def _run(self, tokens, positions, mask, features):
        """Hidden states [B, M, H] after the kept layers and the target's final norm."""
        return self.lean(tokens, positions, mask, self.cache, layers=self.layers)[0]
