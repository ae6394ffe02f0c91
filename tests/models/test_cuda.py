"""GPU checks (run by experiments/device_check.sh on a CUDA machine; skipped where there is none)."""

import pytest
import torch
from conftest import tiny_model

import treespec
from treespec import policies

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_parity_on_the_gpu(arch):
    target = tiny_model(arch, seed=0).cuda()
    draft = tiny_model(arch, seed=1, layers=1).cuda()
    prompt = [3, 17, 5, 9]
    expected = target.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=24, do_sample=False)[0, 4:].tolist()
    for tree in (policies.Chain(4), policies.KAry([3, 2, 1]), policies.Sequoia([0.5, 0.2, 0.1], 10, 5),
                 policies.Dynamic(10, 5, 3)):
        assert treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=24).tokens == expected


def test_sampling_and_bfloat16_run_on_the_gpu():
    target = tiny_model("llama", seed=0).cuda().to(torch.bfloat16)
    draft = tiny_model("llama", seed=1, layers=1).cuda().to(torch.bfloat16)
    out = treespec.generate(target, draft, [1, 2, 3], tree=policies.Sequoia([0.5, 0.2], 8, 4), max_new_tokens=32,
                            temperature=0.7, top_p=0.9, seed=0)
    assert len(out.tokens) == 32 and all(0 <= t < 64 for t in out.tokens)


@pytest.mark.real_models
def test_default_pair_greedy_parity_on_the_gpu():
    from treespec.eval.data import encode_prompt
    from treespec.models import DEFAULT_DRAFT, DEFAULT_TARGET, load_model, load_tokenizer

    target = load_model(DEFAULT_TARGET, device="cuda")
    draft = load_model(DEFAULT_DRAFT, device="cuda")
    tokenizer = load_tokenizer(DEFAULT_TARGET)
    for text in ("Explain photosynthesis in two sentences.", "Write a Python function that reverses a string."):
        prompt = encode_prompt(tokenizer, text)
        expected = target.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=64,
                                   do_sample=False)[0, len(prompt):].tolist()
        got = treespec.generate(target, draft, prompt, tree=policies.Sequoia([0.6, 0.1, 0.05], 12, 6),
                                max_new_tokens=64)
        assert got.tokens == expected[: len(got.tokens)] and len(got.tokens) == len(expected)
