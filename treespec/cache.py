"""KV-cache bookkeeping for tree passes: create a plain cache, and keep only the accepted slots.

After a pass over a tree, the cache holds `prefix_len` committed slots followed by one slot per node
that went through the model. `commit` keeps the prefix plus the slots of the accepted path (a gather of
non-contiguous slots into contiguous ones) and drops the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel

from treespec.errors import ConfigError


def new_cache(model: PreTrainedModel, max_length: int) -> DynamicCache:
    """An empty full-attention cache; refuses sliding-window models whose window is shorter than
    `max_length` (a tree mask replaces the model's own masks, so windows would not be applied)."""
    window = getattr(model.config.get_text_config(), "sliding_window", None)
    uses_window = getattr(model.config.get_text_config(), "use_sliding_window", True)
    if window is not None and uses_window and max_length > window:
        raise ConfigError(
            f"{type(model).__name__} uses a sliding attention window of {window} tokens; prompt + max_new_tokens "
            f"+ tree ({max_length}) must fit inside it"
        )
    return DynamicCache()


def cache_length(cache: DynamicCache) -> int:
    return cache.get_seq_length()


def commit(cache: DynamicCache, prefix_len: int, kept: Sequence[int]) -> None:
    """Keep slots [0, prefix_len) and `prefix_len + kept[j]` (kept ascending), contiguously, in place."""
    kept_index = torch.as_tensor(list(kept), dtype=torch.long)
    new_len = prefix_len + len(kept_index)
    contiguous = bool(len(kept_index) == 0 or torch.equal(kept_index, torch.arange(len(kept_index))))
    for layer in cache.layers:
        if not getattr(layer, "is_initialized", False) or layer.keys is None or layer.keys.numel() == 0:
            continue
        keys, values = layer.keys, layer.values
        if not contiguous:
            index = (prefix_len + kept_index).to(keys.device)
            keys[..., prefix_len:new_len, :] = keys.index_select(-2, index)
            values[..., prefix_len:new_len, :] = values.index_select(-2, index)
        layer.keys, layer.values = keys[..., :new_len, :], values[..., :new_len, :]
