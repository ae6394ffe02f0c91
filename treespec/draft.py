"""Drafters: what tree policies call to get draft logits, one tree level per forward pass.

Protocol (like transformers' CandidateGenerator, split into the calls a tree needs):
  reset(prompt_ids, prefix_hidden)        start a new sequence (prefix_hidden: the target's last hidden
                                          states of prompt_ids[:-1], for drafters that read them)
  root_logits(root_token) -> [V]          logits after the root (the last accepted token)
  node_logits(nodes, tokens, parents) -> [M, V]   logits after M new tree nodes of one level
  observe(outcome)                        the verified result; keep what was accepted
`StepOutcome` also carries the target's hidden states along the accepted path, for drafters that read
them (`treespec.eagle.EagleDrafter`); the engine computes them only for drafters with
`wants_target_hidden`, and for a drafter whose `target_layers` lists target layers (a fused EAGLE head) those
layers' states, fused by `treespec.eagle.target_features`. `ModelDrafter` ignores them.

`ModelDrafter` runs any causal LM that shares the target's tokenizer, with its own KV cache. Its cache
holds the committed tokens, then (during a step) `pending` tokens accepted earlier but not yet seen by
the draft (the last accepted node when it was a leaf), the root, and one slot per forwarded tree node.

Vocabulary subsets: given `vocab` (S token ids, e.g. `vocab_subset(token_counts(...), size)`), the
drafter multiplies its last hidden states by only those S rows of the LM head (for a 0.5B Qwen the full
151,936-row head is 136M of 494M parameters) and returns logits over the full V with -inf outside S.
q is then the draft's distribution renormalised over S; proposals never leave S, and every verification
rule stays exactly lossless (ALGORITHMS.md section 8): the target still scores the full vocabulary.
A draft with 4-bit weights (`treespec.quantize`) keeps its head's codes for those rows.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import PreTrainedModel

from treespec.cache import cache_length, commit, new_cache
from treespec.errors import ConfigError
from treespec.layouts import OneDNNLinear, onednn_linear, onednn_weight
from treespec.lean_decoder import lean_decoder, tensor_version
from treespec.mask import additive
from treespec.quantize import Int4Linear


@dataclass(frozen=True)
class StepOutcome:
    accepted_nodes: tuple[int, ...]  # root first
    accepted_tokens: tuple[int, ...]  # tokens of accepted_nodes
    bonus: int
    target_hidden: torch.Tensor | None = None  # [A, F] target features at accepted_nodes, if requested (F = H: last layer)


class Drafter(Protocol):
    wants_target_hidden: bool

    def reset(self, prompt_ids: Sequence[int], prefix_hidden: torch.Tensor | None = None) -> None: ...

    def root_logits(self, root_token: int) -> torch.Tensor: ...

    def node_logits(self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor: ...

    def observe(self, outcome: StepOutcome) -> None: ...


def token_counts(sequences: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """How often each token id occurs in `sequences` (e.g. the target's answers on a prompt pool): [V] long."""
    ids = [int(t) for seq in sequences for t in seq]
    if any(not 0 <= t < vocab_size for t in ids):
        raise ConfigError(f"token ids must lie in [0, {vocab_size})")
    return torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=vocab_size)


def vocab_subset(counts: torch.Tensor, size: int, always: Collection[int] = ()) -> torch.Tensor:
    """The `size` most frequent token ids of counts [V] (ties: lower id first) plus `always` (e.g. EOS
    and special tokens), sorted: [S] long, S <= size + len(always)."""
    if counts.dim() != 1:
        raise ConfigError(f"counts must be one count per token id, got shape {tuple(counts.shape)}")
    if not 1 <= size <= counts.numel():
        raise ConfigError(f"size must be in [1, {counts.numel()}], got {size}")
    order = torch.sort(counts.double(), descending=True, stable=True).indices  # stable: ties keep id order
    keep = set(order[:size].tolist()) | {int(t) for t in always}
    if any(not 0 <= t < counts.numel() for t in keep):
        raise ConfigError(f"always-kept token ids must lie in [0, {counts.numel()})")
    return torch.tensor(sorted(keep), dtype=torch.long)


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


class ModelDrafter:
    """A causal-LM draft with its own KV cache; see module docstring for the cache layout and `vocab`."""

    wants_target_hidden = False

    def __init__(self, model: PreTrainedModel, max_length: int, vocab: torch.Tensor | None = None, lean: bool = True):
        self.model = model
        self.max_length = max_length
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.lean = lean_decoder(model) if lean else None  # transformers' modules where None
        self.vocab = None
        if vocab is not None:
            self._subset_head(torch.as_tensor(vocab, dtype=torch.long))

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

    def reset(self, prompt_ids: Sequence[int], prefix_hidden: torch.Tensor | None = None) -> None:
        self.cache = new_cache(self.model, self.max_length)
        self.committed = 0  # slots holding tokens accepted and kept
        self.pending = [int(t) for t in prompt_ids[:-1]]
        self._slot: dict[int, int] = {}
        self._parent: dict[int, int] = {}
        self._depth: dict[int, int] = {}

    def _forward(self, tokens: Sequence[int], positions: Sequence[int], visible: torch.Tensor,
                 last_only: bool = False) -> torch.Tensor:
        """Run M new tokens over the cache; visible [M, L + M] bool. Returns logits [M, V] (or [1, V] of the
        last token when `last_only` and a subset head or the lean decoder is used)."""
        if self.lean is not None:
            hidden = self.lean(torch.tensor(list(tokens), device=self.device),
                               torch.tensor(list(positions), device=self.device),
                               additive(visible.to(self.device), self.dtype), self.cache)[0]  # [M, H]
            return self._head(hidden[-1:] if last_only else hidden)
        inputs = dict(
            input_ids=torch.tensor([list(tokens)], device=self.device),
            position_ids=torch.tensor([list(positions)], device=self.device),
            attention_mask=additive(visible.to(self.device), self.dtype),
            cache=self.cache,
            use_cache=True,
        )
        if self.vocab is None:
            return self.model(**inputs).logits[0]
        hidden = self.model.base_model(**inputs).last_hidden_state[0]  # [M, H]
        return self._head(hidden[-1:] if last_only else hidden)

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Last hidden states [M, H] -> logits [M, V] (-inf outside a vocabulary subset)."""
        if self.vocab is None:
            return self.model.get_output_embeddings()(hidden)
        if self._int4 is not None:
            sub = self._int4(hidden)  # [M, S]
        elif self._onednn is not None:
            sub = onednn_linear(hidden, self._onednn, self._bias)  # [M, S]
        else:
            sub = torch.nn.functional.linear(hidden, self._weight, self._bias)  # [M, S]
        logits = sub.new_full((sub.shape[0], self.vocab_size), float("-inf"))  # [M, V]
        logits[:, self.vocab] = sub
        return logits

    def root_logits(self, root_token: int) -> torch.Tensor:
        chain = self.pending + [int(root_token)]
        length, m = self.committed, len(chain)
        visible = torch.ones(m, length + m, dtype=torch.bool)
        visible[:, length:] = torch.ones(m, m, dtype=torch.bool).tril()
        logits = self._forward(chain, range(length, length + m), visible, last_only=True)
        self._root_slot = length + m - 1
        self._slot, self._parent, self._depth = {0: self._root_slot}, {0: -1}, {0: 0}
        return logits[-1]

    def node_logits(self, nodes: Sequence[int], tokens: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        length, m = cache_length(self.cache), len(nodes)
        visible = torch.zeros(m, length + m, dtype=torch.bool)
        visible[:, : self._root_slot] = True  # committed prefix and pending tokens
        for j, (node, parent) in enumerate(zip(nodes, parents)):
            ancestor = parent
            while ancestor >= 0:
                visible[j, self._slot[ancestor]] = True
                ancestor = self._parent[ancestor]
            visible[j, length + j] = True
            self._parent[node], self._depth[node] = parent, self._depth[parent] + 1
        positions = [self._root_slot + self._depth[node] for node in nodes]
        logits = self._forward(tokens, positions, visible)
        for j, node in enumerate(nodes):
            self._slot[node] = length + j
        return logits

    def observe(self, outcome: StepOutcome) -> None:
        path = list(zip(outcome.accepted_nodes[1:], outcome.accepted_tokens[1:]))
        seen = [self._slot[node] - (self._root_slot + 1) for node, _ in path if node in self._slot]
        prefix = self._root_slot + 1  # committed + pending + root are all kept
        commit(self.cache, prefix, seen)
        self.committed = prefix + len(seen)
        self.pending = [token for node, token in path if node not in self._slot]
