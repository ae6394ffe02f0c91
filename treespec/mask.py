"""Flatten a token tree for one forward pass: tokens, position ids and an additive 4-D attention mask.

Index spaces: node i (0 = root) sits at sequence position `prefix_len + depth[i]` (the cache holds
`prefix_len` tokens; the root is the last accepted token, not yet cached) and, during the pass, at cache
slot `prefix_len + i`. Every node sees the whole prefix and exactly its ancestors-or-self in the tree.

The mask is additive float (0 = visible, finfo.min = hidden): transformers' eager attention silently
mishandles 4-D boolean masks (ALGORITHMS.md section 5), additive ones are exact in eager and sdpa.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def ancestors(parents: Sequence[int]) -> torch.Tensor:
    """[N, N] bool: entry (i, j) is True when j is i or an ancestor of i."""
    n = len(parents)
    visible = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        if parents[i] >= 0:
            visible[i] = visible[parents[i]]
        visible[i, i] = True
    return visible


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[M, L] or [B, M, L] bool -> [1 or B, 1, M, L] additive mask in `dtype` (0 visible, finfo.min hidden)."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min).reshape(-1, 1, *visible.shape[-2:])


@dataclass(frozen=True)
class FlatTree:
    input_ids: torch.Tensor  # [1, N]
    position_ids: torch.Tensor  # [1, N]
    attention_mask: torch.Tensor  # [1, 1, N, S + N] additive


def flatten(tokens: torch.Tensor, parents: Sequence[int], depths: Sequence[int], prefix_len: int,
            dtype: torch.dtype) -> FlatTree:
    """Inputs for one target pass over the whole tree on top of a cache of `prefix_len` tokens."""
    device = tokens.device
    n = len(parents)
    visible = torch.ones(n, prefix_len + n, dtype=torch.bool)
    visible[:, prefix_len:] = ancestors(parents)
    positions = prefix_len + torch.as_tensor(depths, dtype=torch.long)
    return FlatTree(tokens.view(1, n), positions.view(1, n).to(device), additive(visible.to(device), dtype))


def flatten_batch(tokens: torch.Tensor, parents: Sequence[Sequence[int]], depths: Sequence[Sequence[int]],
                  lengths: Sequence[int], start: int, dtype: torch.dtype) -> FlatTree:
    """Inputs for one target pass over B trees on top of a right-padded cache of `start` slots.

    tokens [B, N]: row b's tree in its first N_b = len(parents[b]) entries, anything after (padding nodes).
    Row b holds `lengths[b]` tokens in cache slots [0, lengths[b]) (the rest up to `start` is padding). Its
    node i sits at slot start + i and position lengths[b] + depths[b][i], and sees slots [0, lengths[b])
    and exactly its ancestors-or-self; a padding node sees only itself. Returns [B, N] ids and positions
    and a [B, 1, N, start + N] additive mask.
    """
    rows, n = tokens.shape
    visible = torch.zeros(rows, n, start + n, dtype=torch.bool)
    positions = torch.empty(rows, n, dtype=torch.long)
    for b in range(rows):
        size, length = len(parents[b]), int(lengths[b])
        if not 0 < size <= n or length > start:
            raise ValueError(f"row {b}: a tree of {size} nodes over {length} cached tokens does not fit [{n}, {start}]")
        visible[b, :size, :length] = True
        visible[b, :size, start:start + size] = ancestors(parents[b])
        visible[b, size:, start + size:] = torch.eye(n - size, dtype=torch.bool)
        positions[b, :size] = length + torch.as_tensor(depths[b], dtype=torch.long)
        positions[b, size:] = length
    device = tokens.device
    return FlatTree(tokens, positions.to(device), additive(visible.to(device), dtype))
