"""Draft vocabularies: the token ids a draft may propose from (`CausalLMDrafter(vocab=...)`, Medusa heads' own).

A draft whose LM head is a large share of its cost (Qwen2.5-Coder-0.5B: 136M of 494M parameters over 151,936
tokens) gets cheaper levels by scoring only the most frequent tokens; q is renormalised over the subset, so every
verification rule stays lossless. `treespec.eval.corpus.draft_vocabulary` ranks a pair's tokens on the committed
self-distillation corpus.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Sequence

import torch

from treespec.errors import ConfigError
from treespec.models.layouts import OneDNNLinear, onednn_linear, onednn_weight
from treespec.models.lean import tensor_version
from treespec.models.quantize import Int4Linear, Int6Linear, Int8Linear


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
    storage = head.packed if isinstance(head, Int4Linear) else head.codes if isinstance(head, Int8Linear) else \
        head.kernel_codes if isinstance(head, Int6Linear) else head.weight
    key = (type(head), storage.data_ptr(), tensor_version(storage), storage.dtype, tuple(storage.stride()))
    cached = _SUBSET_HEADS.get(head)
    if cached is not None and cached[0] == key and torch.equal(cached[1], vocab):
        return cached[2]
    if isinstance(head, (Int4Linear, Int8Linear, Int6Linear)):
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


class SubsetHead:
    """An LM head restricted to the rows `vocab` [S]: hidden [..., H] -> logits [..., V], -inf outside S. Runs the
    head's own kind of multiply (its 4-bit codes, a oneDNN-reordered copy, or its layout's plain weight)."""

    def __init__(self, head: torch.nn.Module, config, vocab: torch.Tensor):
        if not isinstance(head, (torch.nn.Linear, Int4Linear, Int8Linear)) or getattr(config, "final_logit_softcapping",
                                                                                       None):
            raise ConfigError("a vocabulary subset needs a draft whose LM head is a plain linear layer")
        size = head.out_features
        if vocab.dim() != 1 or vocab.numel() == 0 or vocab.unique().numel() != vocab.numel():
            raise ConfigError("the draft vocabulary subset must be a non-empty 1-D list of distinct token ids")
        if int(vocab.min()) < 0 or int(vocab.max()) >= size:
            raise ConfigError(f"the draft vocabulary subset has ids outside [0, {size})")
        self.vocab, self.vocab_size = vocab, size
        self.int4, self.weight, self.bias, self.onednn = _subset_head_parts(head, vocab)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.int4 is not None:
            sub = self.int4(hidden)  # [..., S]
        elif self.onednn is not None:
            sub = onednn_linear(hidden.to(self.weight.dtype), self.onednn, self.bias)
        else:
            sub = torch.nn.functional.linear(hidden.to(self.weight.dtype), self.weight, self.bias)
        logits = sub.new_full((*sub.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
        logits[..., self.vocab] = sub
        return logits
