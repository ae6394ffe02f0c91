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

import weakref
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from treespec.decode.cache import new_cache
from treespec.decode.engine import Request, StepOutcome
from treespec.drafters.slots import RowSlots
from treespec.errors import ConfigError
from treespec.models.layouts import OneDNNLinear, onednn_linear, onednn_weight
from treespec.models.lean import lean_decoder, tensor_version
from treespec.models.quantize import Int4Linear

_SUBSET_HEADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # head module -> (key, vocab, parts)


def _subset_head_parts(head: torch.nn.Module, vocab: torch.Tensor) -> tuple:
    """(int4 head, weight [S, H], bias [S], oneDNN-reordered weight) for the rows `vocab` [S] of an LM head, the
    parts that do not apply None. Kept per head and reused while the vocabulary, the head's class (its layout) and
    its weight storage and version (in-place changes) stay the same: building them (packing 4-bit codes,
    reordering for oneDNN) took ~0.5 s for a 32768-row subset of Qwen2.5 0.5B's head, on every `generate` call."""
    storage = head.packed if isinstance(head, Int4Linear) else head.weight
    key = (type(head), storage.data_ptr(), tensor_version(storage), storage.dtype, tuple(storage.stride()))
    cached = _SUBSET_HEADS.get(head)
    if cached is not None and cached[0] == key and torch.equal(cached[1], vocab):
        return cached[2]
    if isinstance(head, Int4Linear):
        parts = (head.rows(vocab), None, None, None)  # the same 4-bit codes
    else:
        with torch.no_grad():
            weight = head.weight[vocab]  # [S, H]
            # keep the head's memory layout (layouts.transpose_linear_storage stores [H, S] for small-M GEMMs)
            kept = weight.contiguous() if head.weight.is_contiguous() else weight.t().contiguous().t()
            bias = head.bias[vocab].contiguous() if head.bias is not None else None  # [S]
            # and its oneDNN-reordered copy when the head multiplies through one (layouts.OneDNNLinear)
            parts = (None, kept, bias, onednn_weight(weight) if isinstance(head, OneDNNLinear) else None)
    _SUBSET_HEADS[head] = (key, vocab.clone(), parts)
    return parts


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
        self.vocab = None
        if vocab is not None:
            self._subset_head(torch.as_tensor(vocab, dtype=torch.long))
        self.hidden_out = self.lean is not None or self.vocab is not None  # _run gives hidden states, else logits

    def _subset_head(self, vocab: torch.Tensor) -> None:
        """Keep a copy of the LM head's rows for `vocab` [S]: the only head the drafter runs."""
        head = self.model.get_output_embeddings()
        config = self.model.config.get_text_config()
        if not isinstance(head, (torch.nn.Linear, Int4Linear)) or getattr(config, "final_logit_softcapping", None):
            raise ConfigError("a vocabulary subset needs a draft whose LM head is a plain linear layer")
        size = head.out_features
        if vocab.dim() != 1 or vocab.numel() == 0 or vocab.unique().numel() != vocab.numel():
            raise ConfigError("the draft vocabulary subset must be a non-empty 1-D list of distinct token ids")
        if int(vocab.min()) < 0 or int(vocab.max()) >= size:
            raise ConfigError(f"the draft vocabulary subset has ids outside [0, {size})")
        self.vocab = vocab.to(self.device)
        self.vocab_size = size
        self._int4, self._weight, self._bias, self._onednn = _subset_head_parts(head, self.vocab)

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        self.cache = new_cache(self.model, self.max_length)
        self._begin(len(prompts))
        self.pending = [[int(t) for t in p[:-1]] for p in prompts]

    def _run(self, tokens, positions, mask, features):
        """Hidden states [B, M, H] (lean decoder or a subset head) or logits [B, M, V] of one forward."""
        if self.lean is not None:
            return self.lean(tokens, positions, mask, self.cache)[0]
        inputs = dict(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=self.cache, use_cache=True)
        if self.vocab is None:
            return self.model(**inputs).logits
        return self.model.base_model(**inputs).last_hidden_state

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """`_run`'s output [..., H or V] -> logits [..., V] (-inf outside a vocabulary subset)."""
        if not self.hidden_out:
            return out
        if self.vocab is None:
            return self.model.get_output_embeddings()(out)
        if self._int4 is not None:
            sub = self._int4(out)  # [..., S]
        elif self._onednn is not None:
            sub = onednn_linear(out, self._onednn, self._bias)
        else:
            sub = torch.nn.functional.linear(out, self._weight, self._bias)
        logits = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
        logits[..., self.vocab] = sub
        return logits

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
