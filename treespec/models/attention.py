"""Attention for tree passes: transformers' SDPA without copying the KV cache for grouped-query attention.

With a mask and more than one query token (a tree pass, a batched step), transformers' `sdpa` expands every
key/value head to the query heads it serves (`repeat_kv`: a copy of the whole cache, every layer, every pass),
because masked GQA falls back to a slow kernel on CUDA. On a CPU, `grouped_query_attention` runs the query heads
that share a key/value head as one head with groups x n query rows against that head's cache, read in place: the
same result, and faster than torch's own `enable_gqa=True` (a cache of 400 tokens, bf16, 12 query heads of 128 on 2
key/value heads: 91 against 147 us for 4 query tokens, 285 against 360 for 16, 1.3-1.4 ms with `repeat_kv`; AMD
EPYC, 2 cores, avx512_bf16, 2026-12-02). `treespec_sdpa` (registered with transformers' attention and mask
interfaces on import; `load_model`'s default) does that on CPU tensors and is transformers' `sdpa` everywhere else
(one query token, which transformers packs the same way itself; no mask; a mask per head; CUDA; attention biases).
Past MAX_GROUPED_ROWS query rows (a long prompt) it hands the mask to torch's `enable_gqa` instead of copying it per
group.

Exact attention, for 4-bit targets. A tree pass computes each node's attention with other query rows beside it and
masked keys among its own, so its float32 result differs from one-token decoding's in the last bits; in float32
models that stays in the last bits. A 4-bit product (`quantize.Int4Linear`) rounds its input to bf16, which turns
such a last-bit difference into a bf16 step whenever it straddles a rounding boundary, and the two decodings
drift apart (on the default 135M target held in 4 bits, a chain of 8 tokens came out up to 0.23 off one-token
decoding's hidden states after 30 layers). Its products are row-invariant (each row's output is the same whatever
rows share the call), so once attention is too, so is the model: `exact_attention(module)` says when an attention
feeds such a product (its `o_proj` is 4-bit), and attention then runs in float64 and is rounded once to the
query's dtype. The error of a float64 sum of float32 products is far below float32's step, so the rounded result
is the same for any arrangement of rows and masked keys (unless it lies within about 1e-16 of a rounding midpoint)
and a 4-bit target's tree passes reproduce its one-token decoding bit for bit (tests/models/test_quantize.py). The
cost on the default target: about 2 ms of a 27 ms 1-token pass (AMD EPYC, 2 cores, avx512_bf16, 2026-12-03).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from treespec.models.quantize import Int4Linear, Int6Linear

NAME = "treespec_sdpa"


def attention_shape(config) -> tuple[int, int, int]:
    """(head size, query heads, key/value heads) of a transformers config (its text config's)."""
    config = config.get_text_config()
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return head_dim, heads, getattr(config, "num_key_value_heads", None) or heads


def exact_attention(module: torch.nn.Module) -> bool:
    """Whether an attention module's output feeds a product that rounds its input to bf16 (a 4- or 6-bit `o_proj`):
    then its attention must be exact (the module docstring)."""
    return isinstance(getattr(module, "o_proj", None), (Int4Linear, Int6Linear))


def in_float64(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """A floating tensor in float64 (an additive mask included); a boolean mask or None as it is."""
    return tensor.double() if tensor is not None and tensor.is_floating_point() else tensor


def _reads_cache_in_place(module: torch.nn.Module, query: torch.Tensor, attention_mask: torch.Tensor | None,
                          kwargs: dict) -> bool:
    groups = getattr(module, "num_key_value_groups", 1)
    return (groups > 1 and query.device.type == "cpu" and attention_mask is not None and query.shape[2] > 1
            and attention_mask.shape[1] == 1 and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
            and not kwargs.get("output_attentions", False))


MAX_GROUPED_ROWS = 2048  # above groups x n query rows (a long prefill), torch's enable_gqa: no mask copy per group


def group_mask(mask: torch.Tensor | None, groups: int) -> torch.Tensor | None:
    """mask [B or 1, 1, n, kv] -> [B or 1, 1, groups * n, kv], the rows `grouped_query_attention` runs (a mask that
    already has them, or groups 1, or more rows than MAX_GROUPED_ROWS, comes back as it is)."""
    if mask is None or groups == 1 or groups * mask.shape[-2] > MAX_GROUPED_ROWS:
        return mask
    rows, n, kv = mask.shape[0], mask.shape[-2], mask.shape[-1]
    return mask.expand(rows, groups, n, kv).reshape(rows, 1, groups * n, kv)


def grouped_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                            scale: float | None = None, dropout: float = 0.0, exact: bool = False) -> torch.Tensor:
    """query [B, H, n, d], key/value [B, H_kv, kv, d] (H a multiple of H_kv; query head h reads key/value head
    h // (H / H_kv)), mask [B or 1, 1, n, kv] additive or bool (or `group_mask` of it), or None -> [B, H, n, d].
    exact: computed in float64 and rounded once to query's dtype (`exact_attention`)."""
    if exact:
        output = grouped_query_attention(query.double(), key.double(), value.double(), in_float64(mask), scale,
                                         dropout)
        return output.to(query.dtype)
    batch, heads, n, dim = query.shape
    groups = heads // key.shape[1]
    if groups * n > MAX_GROUPED_ROWS:
        if mask is not None and mask.shape[-2] != n:
            raise ValueError("a grouped mask for more rows than MAX_GROUPED_ROWS")
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                                                scale=scale, enable_gqa=True)
    if mask is not None and mask.shape[-2] == n:
        mask = group_mask(mask, groups)
    grouped = query.reshape(batch, key.shape[1], groups * n, dim)  # the heads of a group one after another
    output = torch.nn.functional.scaled_dot_product_attention(grouped, key, value, attn_mask=mask, dropout_p=dropout,
                                                              scale=scale)
    return output.reshape(batch, heads, n, dim)


def gqa_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """query [B, H, n, d], key/value [B, H_kv, kv, d], attention_mask [B, 1, n, kv] (additive or bool) ->
    ([B, n, H, d], None), as transformers' `sdpa_attention_forward` returns it; in float64 where
    `exact_attention(module)`, rounded once to query's dtype."""
    if exact_attention(module) and query.dtype != torch.float64:
        output, _ = gqa_sdpa_forward(module, query.double(), key.double(), value.double(), in_float64(attention_mask),
                                     dropout, scaling, is_causal, **kwargs)
        return output.to(query.dtype), None
    if not _reads_cache_in_place(module, query, attention_mask, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    output = grouped_query_attention(query, key, value, attention_mask, scale=scaling, dropout=dropout)
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, gqa_sdpa_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
