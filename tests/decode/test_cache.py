"""Committing the accepted path leaves the same KV cache as processing those tokens from scratch."""

import pytest
import torch
from conftest import ARCHS, OneRow, tiny_model
from transformers import DynamicCache

from treespec.decode.cache import PreallocatedLayer, cache_length, commit, new_cache
from treespec.decode.engine import StepOutcome
from treespec.decode.mask import flatten
from treespec.decode.tree import kary
from treespec.drafters import CausalLMDrafter
from treespec.errors import ConfigError


def _layers(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]



def prefill_and_tree_pass(model, prefix, tree, tokens):
    """The engine's cache after a prefill of `prefix` and one flattened pass of `tree` (`tokens` [N])."""
    cache = new_cache(model, 32)
    model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
    flat = flatten(tokens[None], [tree.parents], [tree.depths], [len(prefix)], len(prefix), torch.float32)
    model(input_ids=flat.input_ids, position_ids=flat.position_ids, attention_mask=flat.attention_mask,
          cache=cache, use_cache=True)
    return cache

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("accepted", [(0,), (0, 2), (0, 1, 4), (0, 2, 6), (0, 2, 5)])
def test_commit_equals_rebuilt_cache(arch, accepted):
    """The engine's own cache (new_cache: PreallocatedLayer per layer), as the engine uses it: a prefill, a
    tree pass, commit, then the next pass; against a cache built from the accepted tokens from scratch."""
    model = tiny_model(arch, sharpness=1.0)
    prefix = [5, 9, 13, 2]
    tree = kary([2, 2])  # nodes: 0 | 1 2 | 3 4 (under 1) 5 6 (under 2)
    tokens = torch.tensor([7, 20, 21, 30, 31, 32, 33])
    with torch.no_grad():
        cache = prefill_and_tree_pass(model, prefix, tree, tokens)
        assert commit(cache, [len(prefix)], len(prefix), [accepted]) == [len(prefix) + len(accepted)]
        fresh = new_cache(model, 32)
        kept = prefix + tokens[list(accepted)].tolist()
        model(input_ids=torch.tensor([kept]), cache=fresh, use_cache=True)
        assert all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
        assert cache_length(cache) == len(kept)
        for (k, v), (k2, v2) in zip(_layers(cache), _layers(fresh)):
            torch.testing.assert_close(k, k2, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(v, v2, atol=1e-5, rtol=1e-4)
        # the next pass (the bonus as the new root) reads the committed slots
        after = model(input_ids=torch.tensor([[40]]), position_ids=torch.tensor([[len(kept)]]), cache=cache,
                      use_cache=True).logits[0, -1]
        expected = model(input_ids=torch.tensor([kept + [40]])).logits[0, -1]
    torch.testing.assert_close(after, expected, atol=1e-5, rtol=1e-4)


def test_commit_keeps_the_gathered_slots_not_the_first_ones():
    """A commit that kept the first slots instead of the accepted path's would pass a contiguous path;
    a non-first sibling's path tells them apart."""
    model = tiny_model("llama", sharpness=1.0)
    prefix, tree = [5, 9, 13, 2], kary([2, 2])
    tokens = torch.tensor([7, 20, 21, 30, 31, 32, 33])
    with torch.no_grad():
        cache = prefill_and_tree_pass(model, prefix, tree, tokens)
        keys_of_node_6 = [layer.keys[..., len(prefix) + 6, :].clone() for layer in cache.layers]
        commit(cache, [len(prefix)], len(prefix), [(0, 2, 6)])
        for layer, key in zip(cache.layers, keys_of_node_6):
            torch.testing.assert_close(layer.keys[..., len(prefix) + 2, :], key)


def test_drafter_cache_tracks_accepted_tokens():
    model = tiny_model("llama", sharpness=1.0)
    drafter = OneRow(CausalLMDrafter(model, 64))
    prompt = [3, 4, 5, 6]
    with torch.no_grad():
        drafter.reset(prompt)
        drafter.root_logits(6)
        drafter.node_logits([1, 2], [10, 11], [0, 0])
        drafter.node_logits([3], [12], [2])  # node 4 (a leaf under 3) is never forwarded
        drafter.observe(StepOutcome((0, 2, 3, 4), (6, 11, 12, 40), bonus=41))
        assert drafter.row("pending") == [40]
        fresh = DynamicCache()
        model(input_ids=torch.tensor([prompt + [11, 12]]), cache=fresh, use_cache=True)
        assert drafter.row("committed") == cache_length(drafter.cache) == 6
        for (k, v), (k2, v2) in zip(_layers(drafter.cache), _layers(fresh)):
            torch.testing.assert_close(k, k2, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(v, v2, atol=1e-5, rtol=1e-4)
        # the next root's logits see the pending leaf first
        logits = drafter.root_logits(41)
        expected = model(input_ids=torch.tensor([prompt + [11, 12, 40, 41]])).logits[0, -1]
        torch.testing.assert_close(logits, expected, atol=2e-5, rtol=1e-4)


def test_sliding_window_models_must_fit_the_window():
    model = tiny_model("llama")
    model.config.sliding_window = 16
    with pytest.raises(ConfigError, match="sliding attention window"):
        new_cache(model, 40)
    assert cache_length(new_cache(model, 16)) == 0


def test_preallocated_cache_grows_and_matches_a_dynamic_cache():
    from transformers.cache_utils import Cache

    from treespec.decode.cache import PreallocatedLayer

    model = tiny_model("llama", sharpness=1.0)
    small = Cache(layers=[PreallocatedLayer(3) for _ in range(model.config.num_hidden_layers)])
    dynamic = DynamicCache()
    tokens = torch.tensor([[4, 8, 15, 16, 23, 42, 7, 9]])
    with torch.no_grad():
        for start in range(0, 8, 2):  # four appends of two tokens: the 3-slot buffers must grow
            a = model(input_ids=tokens[:, start:start + 2], cache=small, use_cache=True).logits
            b = model(input_ids=tokens[:, start:start + 2], cache=dynamic, use_cache=True).logits
            torch.testing.assert_close(a, b)
    assert cache_length(small) == 8 and small.layers[0].capacity >= 8
    commit(small, [5], 5, [[1, 2]])
    commit(dynamic, [5], 5, [[1, 2]])
    assert cache_length(small) == cache_length(dynamic) == 7
    for (k, v), (k2, v2) in zip(_layers(small), _layers(dynamic)):
        torch.testing.assert_close(k, k2)
        torch.testing.assert_close(v, v2)


def test_rows_whose_path_is_in_place_move_nothing():
    """commit over right-padded rows: a row whose kept slots are already behind its tokens (a full row, its path
    the first nodes) is left as it is; a shorter row's slots move behind its own tokens."""
    cache = new_cache(tiny_model("llama"), 16)
    for layer in cache.layers:
        layer.update(torch.arange(2 * 2 * 8 * 4, dtype=torch.float32).view(2, 2, 8, 4), torch.zeros(2, 2, 8, 4))
    before = [layer.keys.clone() for layer in cache.layers]
    assert commit(cache, [5, 3], 5, [[0, 1], [0, 2]]) == [7, 5]
    for layer, old in zip(cache.layers, before):
        assert torch.equal(layer.keys[0, :, :7], old[0, :, :7])  # row 0: slots 5 and 6 are its path already
        assert torch.equal(layer.keys[1, :, :3], old[1, :, :3])
        assert torch.equal(layer.keys[1, :, 3], old[1, :, 5]) and torch.equal(layer.keys[1, :, 4], old[1, :, 7])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_slot_moves_in_c_equal_the_gather_and_scatter(dtype, monkeypatch):
    """commit's one C call for every buffer (treespec/models/cache_moves.c) leaves the buffers, bit for bit, as the
    torch gather and scatter per buffer does: rows of other lengths, a row in place, paths that skip nodes."""
    import treespec.decode.cache as cache_module

    if cache_module._slot_mover() is None:
        pytest.skip("treespec's kernels do not build here")
    generator = torch.Generator().manual_seed(0)
    model = tiny_model("llama")

    def filled():
        cache = new_cache(model, 16)
        for layer in cache.layers:
            layer.storage_dtype = dtype
            layer.update(torch.zeros(3, 2, 12, 4), torch.zeros(3, 2, 12, 4))  # 12 slots filled, then all of it below
        return cache

    lengths, start, kept = [9, 5, 7], 9, [[0, 1], [1, 2], [0, 2]]  # row 0: in place; rows 1 and 2 move
    in_c, in_torch = filled(), filled()
    for a, b in zip(in_c.layers, in_torch.layers):  # the same values in both, the unfilled capacity included
        for name in ("key_buffer", "value_buffer"):
            values = torch.randn(getattr(a, name).shape, generator=generator, dtype=dtype)
            getattr(a, name).copy_(values)
            getattr(b, name).copy_(values)
    before = [layer.key_buffer.clone() for layer in in_c.layers]
    assert commit(in_c, lengths, start, kept) == [11, 7, 9]
    monkeypatch.setattr(cache_module, "_move_slots", lambda *args: False)
    assert commit(in_torch, lengths, start, kept) == [11, 7, 9]
    for a, b in zip(in_c.layers, in_torch.layers):
        assert a.key_buffer.dtype == dtype
        assert torch.equal(a.key_buffer, b.key_buffer) and torch.equal(a.value_buffer, b.value_buffer)
    for layer, old in zip(in_c.layers, before):  # row 1: slots 10, 11 -> 5, 6; row 2: slots 9, 11 -> 7, 8
        assert torch.equal(layer.keys[1, :, 5:7], old[1, :, 10:12])
        assert torch.equal(layer.keys[2, :, 7], old[2, :, 9]) and torch.equal(layer.keys[2, :, 8], old[2, :, 11])
        assert torch.equal(layer.keys[0, :, :11], old[0, :, :11])
