"""Flatten token trees for one forward pass over B rows: tokens, position ids and an additive 4-D attention mask.

Index spaces (converted here and nowhere else): row b's cache holds `lengths[b]` tokens in slots [0, lengths[b])
of a right-padded cache `start` slots wide; its tree node i (0 = the root, the last accepted token, not yet cached)
sits at cache slot `start + i` during the pass and at sequence position `lengths[b] + depth[i]`. Every node sees
its row's cached tokens and exactly its ancestors-or-self in the tree; padding nodes (rows with smaller trees)
see only themselves. One row (B = 1) is the same arithmetic with `start == lengths[0]`.

The mask is additive float (0 = visible, finfo.min = hidden): transformers' eager attention silently mishandles
4-D boolean masks (docs/algorithms.md, "Traps"), additive ones are exact in eager and sdpa.
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


def causal_mask(lengths: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [B, 1, W, W] mask for right-padded sequences of `lengths` [B]: causal, hiding the padding beyond
    each row's length (padded queries see themselves)."""
    positions = torch.arange(width, device=lengths.device)
    visible = (positions[None, :] <= positions[:, None])[None] & (positions[None, None, :] < lengths[:, None, None])
    visible |= torch.eye(width, dtype=torch.bool, device=lengths.device)[None]
    return additive(visible, dtype)


@dataclass(frozen=True)
class FlatTrees:
    input_ids: torch.Tensor  # [B, N] (rows padded to the widest tree)
    position_ids: torch.Tensor  # [B, N]
    attention_mask: torch.Tensor  # [B, 1, N, start + N] additive


def flatten(tokens: torch.Tensor, parents: Sequence[Sequence[int]], depths: Sequence[Sequence[int]],
            lengths: Sequence[int], start: int, dtype: torch.dtype) -> FlatTrees:
    """Inputs for one target pass over B trees on top of a right-padded cache of `start` slots.

    tokens [B, N]: row b's tree in its first N_b = len(parents[b]) entries, anything after (padding nodes).
    Row b holds `lengths[b]` tokens in cache slots [0, lengths[b]) (see the module docstring).
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
        if size < n:
            visible[b, size:, start + size:] = torch.eye(n - size, dtype=torch.bool)
        positions[b, :size] = length + torch.as_tensor(depths[b], dtype=torch.long)
        positions[b, size:] = length
    device = tokens.device
    return FlatTrees(tokens, positions.to(device), additive(visible.to(device), dtype))
