"""Draft vocabularies: the token ids a causal-LM draft may propose from (`CausalLMDrafter(vocab=...)`).

A draft whose LM head is a large share of its cost (Qwen2.5-Coder-0.5B: 136M of 494M parameters over 151,936
tokens) gets cheaper levels by scoring only the most frequent tokens; q is renormalised over the subset, so every
verification rule stays lossless. `treespec.eval.corpus.draft_vocabulary` ranks a pair's tokens on the committed
self-distillation corpus.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from treespec.errors import ConfigError


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
