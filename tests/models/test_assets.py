"""The offline default pair: the GGUF target, the committed drafts (size, model card), exact decoding."""

from pathlib import Path

import pytest
import torch
from conftest import OneRow

import treespec
from treespec import models
from treespec.drafters import EagleDrafter
from treespec.eval.data import encode_prompt
from treespec.models.draft_lm import TreespecDraftForCausalLM
from treespec.models.eagle_head import EagleDraftModel, target_features

pytestmark = pytest.mark.real_models
ASSETS = Path(models.__file__).parents[1] / "assets"
DRAFTS = {models.PLAIN_DRAFT: TreespecDraftForCausalLM, models.DEFAULT_DRAFT: EagleDraftModel}


@pytest.fixture(scope="module")
def target():
    return models.load_model(models.DEFAULT_TARGET)


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer(models.DEFAULT_TARGET)


def test_default_target_loads_offline(target, tokenizer):
    assert target.config.num_hidden_layers == 30 and target.dtype == torch.float32
    assert tokenizer.chat_template and tokenizer.eos_token_id == target.generation_config.eos_token_id


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_committed_draft_is_small_documented_and_loads(name, target):
    directory = ASSETS / name
    size_mb = sum(p.stat().st_size for p in directory.iterdir()) / 1e6
    assert size_mb <= 35, f"{name} is {size_mb:.1f} MB"  # the default head: 16384 output rows, its tokenizer: 33.1 MB
    for file in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "training_summary.json"):
        assert (directory / file).is_file(), file
    assert "## Measured against the target" in (directory / "README.md").read_text()
    draft = models.load_model(name)
    assert isinstance(draft, DRAFTS[name]) and draft.dtype == torch.float32
    models.check_pair(target, draft)


@pytest.mark.parametrize("name", sorted(DRAFTS))
def test_greedy_decoding_with_each_draft_is_exact(name, target, tokenizer):
    draft = models.load_model(name)
    prompt = encode_prompt(tokenizer, "Name three colours and say why people like them.")
    expected = target.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0, len(prompt):].tolist()
    for tree in (treespec.policies.Chain(3), treespec.policies.Dynamic(8, 4, 3)):
        got = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=24)
        assert got.tokens == expected[: len(got.tokens)] and len(got.tokens) == len(expected)


def test_committed_eagle_head_is_fused_and_drafts_as_when_it_was_committed(target, tokenizer):
    """The default head fuses target layers 3, 15 and 30 (EAGLE-3's low, mid and top features) and drafts exactly
    as it did when it was committed: its steps and logits then (1 torch thread, an AMD EPYC with avx512_bf16)."""
    draft = models.load_model(models.DEFAULT_DRAFT)
    assert draft.config.feature_layers == [3, 15, 30] and draft.fuse.weight.shape == (576, 3 * 576)
    assert draft.lm_head.weight.shape == (16384, 576)  # grown from 8192 output tokens (vocab.grow)
    prompt = encode_prompt(tokenizer, "Name three colours and say why people like them.")
    got = treespec.generate(target, draft, prompt, tree=treespec.policies.Dynamic(8, 4, 3), max_new_tokens=24)
    assert [(s.tree_size, s.accepted, s.accepted_ranks) for s in got.steps] == [
        (8, 1, ()), (8, 3, (0, 0)), (8, 4, (0, 0, 0)), (8, 2, (0,)), (8, 1, ()), (8, 4, (1, 0, 0)), (8, 1, ()),
        (8, 2, (0,)), (8, 3, (0, 0)), (8, 3, (0, 1))]
    with torch.no_grad():
        drafter = OneRow(EagleDrafter(draft, target, 128))
        out = target.base_model(torch.tensor([prompt[:-1]]), output_hidden_states=True)
        drafter.reset(prompt, target_features(target, out, draft.config.feature_layers)[0])
        root = drafter.root_logits(prompt[-1]).topk(5)
        nodes = drafter.node_logits([1, 2], [33, 504], [0, 0]).topk(3, dim=-1)
    assert root.indices.tolist() == [504, 788, 2122, 3965, 33]
    torch.testing.assert_close(root.values, torch.tensor([20.0471, 19.3103, 19.2053, 18.7952, 18.7757]), atol=2e-3, rtol=0)
    assert nodes.indices.tolist() == [[30, 31752, 25], [4683, 2988, 768]]
    torch.testing.assert_close(nodes.values, torch.tensor([[14.372, 10.8201, 10.3593], [1.9975, 1.8996, 1.5872]]),
                               atol=2e-3, rtol=0)
