"""Attention for tree passes: transformers' SDPA without copying the KV cache for grouped-query attention.

With a mask and more than one query token (a tree pass, a batched step), transformers' `sdpa` expands every
key/value head to the query heads it serves (`repeat_kv`: a copy of the whole cache, every layer, every pass),
because masked GQA falls back to a slow kernel on CUDA. On a CPU, `scaled_dot_product_attention(...,
enable_gqa=True)` takes the mask and reads the cache in place, with the same result. `treespec_sdpa` (registered
with transformers' attention and mask interfaces on import; `load_model`'s default) does that on CPU tensors and
is transformers' `sdpa` everywhere else (one query token, no mask, CUDA, attention biases).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "treespec_sdpa"


def _reads_cache_in_place(module: torch.nn.Module, query: torch.Tensor, attention_mask: torch.Tensor | None,
                          kwargs: dict) -> bool:
    groups = getattr(module, "num_key_value_groups", 1)
    return (groups > 1 and query.device.type == "cpu" and attention_mask is not None and query.shape[2] > 1
            and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
            and not kwargs.get("output_attentions", False))


def gqa_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, H, n, d], key/value [B, H_kv, kv, d], attention_mask [B, 1, n, kv] (additive or bool) ->
    ([B, n, H, d], None), as transformers' `sdpa_attention_forward` returns it."""
    if not _reads_cache_in_place(module, query, attention_mask, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, gqa_sdpa_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
