"""A causal-LM draft (any model sharing the target's tokenizer) with its own KV cache, for B >= 1 rows.

Cache layout: `treespec.drafters.slots`. Between steps a row's cache holds its committed tokens; `pending` holds
the tokens accepted earlier but not yet seen by the draft (the prompt at the start, the last accepted node when
it was a leaf), which the next root pass reads before the root. Passes run through the lean decoder
(treespec.models.lean) where the draft allows it, else through transformers' modules.

Vocabulary subsets: given `vocab` (S token ids, e.g. `vocab_subset(token_counts(...), size)`), the drafter
multiplies its last hidden states by only those S rows of the LM head (for a 0.5B Qwen the full 151,936-row head
is 136M of 494M parameters) and returns logits over the full V with -inf outside S. q is then the draft's
distribution renormalised over S; proposals never leave S, and every verification rule stays exactly lossless
(docs/algorithms.md): the target still scores the full vocabulary. A draft with 4-bit weights
(treespec.models.quantize) keeps its head's codes for those rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.cache import new_cache
from treespec.decode.engine import Request, StepOutcome
from treespec.drafters.slots import RowSlots
from treespec.drafters.vocab import SubsetHead
from treespec.models.lean import lean_decoder


class CausalLMDrafter(RowSlots):
    """A causal-LM draft over right-padded rows; see the module docstring for `vocab` and `lean`."""

    wants_target_hidden = False
    target_layers: tuple[int, ...] = ()
    _row_state = ("pending",)

    def __init__(self, model: PreTrainedModel, max_length: int, vocab: torch.Tensor | None = None, lean: bool = True):
        self.model, self.max_length = model, max_length
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.lean = lean_decoder(model) if lean else None  # transformers' modules where None
        self.subset = None  # the LM head's rows for a vocabulary subset, the only head the drafter then runs
        if vocab is not None:
            self.subset = SubsetHead(self.model.get_output_embeddings(), self.model.config.get_text_config(),
                                     torch.as_tensor(vocab, dtype=torch.long).to(self.device))
        self.hidden_out = self.lean is not None or self.subset is not None  # _run gives hidden states, else logits

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        self.cache = new_cache(self.model, self.max_length)
        self._begin(len(prompts))
        self.pending = [[int(t) for t in p[:-1]] for p in prompts]

    def pending_lengths(self) -> list[int]:
        """Per row, the accepted tokens its next root pass reads before the root (those it has not seen yet)."""
        return [len(pending) for pending in self.pending]

    def _run(self, tokens, positions, mask, features):
        """Hidden states [B, M, H] (lean decoder or a subset head) or logits [B, M, V] of one forward."""
        if self.lean is not None:
            return self.lean(tokens, positions, mask, self.cache)[0]
        inputs = dict(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=self.cache, use_cache=True)
        if self.subset is None:
            return self.model(**inputs).logits
        return self.model.base_model(**inputs).last_hidden_state

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """`_run`'s output [..., H or V] -> logits [..., V] (-inf outside a vocabulary subset)."""
        if not self.hidden_out:
            return out
        if self.subset is None:
            return self.model.get_output_embeddings()(out)
        return self.subset(out)

    def root_logits(self, roots: Sequence[int]) -> torch.Tensor:
        chains = [pending + [int(root)] for pending, root in zip(self.pending, roots)]
        return self._logits(self._chain_pass(chains, None))  # [B, V]

    def node_logits(self, requests: Sequence[Request | None]) -> list[torch.Tensor]:
        logits = self._logits(self._node_pass(requests, None))  # [B, M, V]
        return [logits[b, : len(r[0]) if r else 0] for b, r in enumerate(requests)]

    def absorb(self, outcomes: Sequence[StepOutcome]) -> None:
        """Steps the draft did not draft (another source's tree): each row's root and accepted path become pending."""
        for b, outcome in enumerate(outcomes):
            self.pending[b] = self.pending[b] + [int(t) for t in outcome.accepted_tokens]

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """Row b keeps its chain and the accepted nodes the draft has seen; the rest of its path is pending."""
        kept = []
        for b, outcome in enumerate(outcomes):
            path = list(zip(outcome.accepted_nodes[1:], outcome.accepted_tokens[1:]))
            seen = [self._slot[b][node] - self._start for node, _ in path if node in self._slot[b]]
            kept.append(list(range(self._chain[b])) + seen)
            self.pending[b] = [token for node, token in path if node not in self._slot[b]]
        self._keep(kept)
