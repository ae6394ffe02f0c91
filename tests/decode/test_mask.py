"""Tree-masked passes: every node's logits equal a plain forward over prefix + its root path."""

import pytest
import torch
from conftest import ARCHS, ATTNS, tiny_model
from transformers import DynamicCache

from treespec.decode.mask import additive, ancestors, flatten
from treespec.decode.tree import TreeShape, kary


def test_ancestors_matrix():
    visible = ancestors((-1, 0, 0, 1, 2))
    expected = torch.tensor([
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 0, 1, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(visible, expected)


def test_additive_mask_values():
    mask = additive(torch.tensor([[True, False]]), torch.float32)
    assert mask.shape == (1, 1, 1, 2)
    assert mask[0, 0, 0, 0] == 0 and mask[0, 0, 0, 1] == torch.finfo(torch.float32).min


def test_flatten_positions_and_shape():
    tree = kary([2, 2])
    flat = flatten(torch.arange(tree.size)[None], [tree.parents], [tree.depths], [5], 5, torch.float32)
    assert flat.input_ids.shape == (1, 7) and flat.attention_mask.shape == (1, 1, 7, 12)
    assert flat.position_ids.tolist() == [[5, 6, 6, 7, 7, 7, 7]]
    assert (flat.attention_mask[0, 0, :, :5] == 0).all()  # everyone sees the prefix


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("attn", ATTNS)
def test_tree_logits_equal_per_path_recomputation(arch, attn):
    model = tiny_model(arch, attn=attn, sharpness=1.0)
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, 64, (9,), generator=generator).tolist()
    tree = TreeShape.from_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0), (0, 1, 1)])
    tokens = torch.randint(0, 64, (tree.size,), generator=generator)
    tokens[1], tokens[2] = 11, 11  # equal sibling tokens must not see each other
    with torch.no_grad():
        cache = DynamicCache()
        model(input_ids=torch.tensor([prefix]), cache=cache, use_cache=True)
        flat = flatten(tokens[None], [tree.parents], [tree.depths], [len(prefix)], len(prefix), torch.float32)
        logits = model(input_ids=flat.input_ids, position_ids=flat.position_ids, attention_mask=flat.attention_mask,
                       cache=cache, use_cache=True).logits[0]
        for node in range(tree.size):
            path, walk = [], node
            while walk >= 0:
                path.append(int(tokens[walk]))
                walk = tree.parents[walk]
            expected = model(input_ids=torch.tensor([prefix + path[::-1]])).logits[0, -1]
            torch.testing.assert_close(logits[node], expected, atol=2e-5, rtol=1e-4)
