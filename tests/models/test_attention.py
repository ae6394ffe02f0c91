import pytest
import torch
from transformers.integrations import sdpa_attention

from treespec import models
from treespec.decode.mask import additive
from treespec.models import attention


class _Heads(torch.nn.Module):
    """What the attention functions read from an attention module."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _inputs(batch: int, heads: int, kv_heads: int, n: int, prefix: int, *, boolean: bool, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, heads, n, 16, generator=gen)
    # the cache is longer than what is filled, as a preallocated one is: keys/values are a view
    key = torch.randn(batch, kv_heads, prefix + n + 5, 16, generator=gen)[:, :, : prefix + n]
    value = torch.randn(batch, kv_heads, prefix + n + 5, 16, generator=gen)[:, :, : prefix + n]
    allowed = torch.ones(batch, 1, n, prefix + n, dtype=torch.bool)
    allowed[..., prefix:] = torch.rand(batch, 1, n, n, generator=gen) < 0.5
    allowed[..., prefix:] |= torch.eye(n, dtype=torch.bool)  # a node sees itself
    allowed[-1, ..., :3] = False  # the last row is left-padded
    return query, key, value, allowed if boolean else additive(allowed, torch.float32)


@pytest.mark.parametrize("boolean", [False, True])
@pytest.mark.parametrize("n", [2, 5])
def test_tree_attention_reads_the_cache_in_place_and_equals_transformers_sdpa(monkeypatch, boolean, n):
    query, key, value, mask = _inputs(2, 6, 2, n, 7, boolean=boolean)
    expected, _ = sdpa_attention.sdpa_attention_forward(_Heads(3), query, key, value, mask, scaling=0.25)

    def no_copy(*args):
        raise AssertionError("the key/value cache was expanded to the query heads")

    monkeypatch.setattr(sdpa_attention, "repeat_kv", no_copy)
    got, weights = attention.gqa_sdpa_forward(_Heads(3), query, key, value, mask, scaling=0.25)
    assert weights is None and got.shape == (2, n, 6, 16) and got.is_contiguous()
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    with pytest.raises(AssertionError, match="expanded"):  # what transformers' sdpa does with this input
        sdpa_attention.sdpa_attention_forward(_Heads(3), query, key, value, mask, scaling=0.25)


@pytest.mark.parametrize("groups, n, with_mask", [(3, 1, True), (1, 4, True), (3, 4, False)])
def test_other_inputs_go_to_transformers_sdpa(monkeypatch, groups, n, with_mask):
    """One query token, no grouped heads, or no mask: transformers' own path (it packs a single query itself)."""
    query, key, value, mask = _inputs(1, 6, 6 // groups, n, 4, boolean=False)
    calls = []
    original = attention.sdpa_attention_forward
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    attention.gqa_sdpa_forward(_Heads(groups), query, key, value, mask if with_mask else None)
    assert calls == [1]


def test_models_load_with_it_by_default():
    model = models.load_model("tiny-random-llama")
    assert model.config._attn_implementation == attention.NAME == "treespec_sdpa"
    assert models.load_model("tiny-random-llama", attn_implementation="sdpa").config._attn_implementation == "sdpa"


@pytest.mark.parametrize("mask_rows", [None, 1, 2])
def test_grouped_query_attention_equals_attention_on_repeated_heads(mask_rows):
    query, key, value, mask = _inputs(2, 6, 2, 3, 5, boolean=True)
    if mask_rows == 1:
        mask = mask[:1]
    elif mask_rows is None:
        mask = None
    repeated = [t.repeat_interleave(3, dim=1) for t in (key, value)]  # head h reads key/value head h // 3
    expected = torch.nn.functional.scaled_dot_product_attention(query, *repeated, attn_mask=mask)
    got = attention.grouped_query_attention(query, key, value, mask)
    assert got.shape == query.shape
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
