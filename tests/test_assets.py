"""The offline default pair: the GGUF target, the committed drafts (size, model card), exact decoding."""

from pathlib import Path

import pytest
import torch

import treespec
from treespec import models
from treespec.data import encode_prompt
from treespec.eagle import EagleDraftModel
from treespec.training.draft_model import TreespecDraftForCausalLM

ASSETS = Path(models.__file__).parent / "assets"
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
    assert size_mb <= 30, f"{name} is {size_mb:.1f} MB"
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
