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
