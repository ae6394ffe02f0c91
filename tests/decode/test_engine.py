"""End-to-end engine tests: greedy parity with transformers, EOS and length limits, input checks."""

from __future__ import annotations

import pytest
import torch
from conftest import ARCHS, ATTNS, PROMPTS, all_policies, reference, tiny_model

import treespec
from treespec import policies
from treespec.errors import ConfigError


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("attn", ATTNS)
def test_greedy_parity_every_policy(arch, attn):
    target = tiny_model(arch, seed=0, attn=attn)
    draft = tiny_model(arch, seed=1, layers=1, attn=attn)
    for prompt in PROMPTS:
        expected = reference(target, prompt, 24)
        for name, tree in all_policies().items():
            got = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=24)
            assert got.tokens == expected, (arch, attn, name, prompt)
            assert sum(s.accepted for s in got.steps) == 24


def test_self_draft_accepts_every_drafted_token(llama_pair):
    target, _ = llama_pair
    got = treespec.generate(target, target, PROMPTS[0], tree=policies.Chain(4), max_new_tokens=25)
    assert got.tokens == reference(target, PROMPTS[0], 25)
    assert [s.accepted for s in got.steps] == [5] * 5
    assert all(s.accepted_ranks == (0, 0, 0, 0) for s in got.steps[:-1])


def test_autoregressive_is_one_token_per_pass(llama_pair):
    target, _ = llama_pair
    got = treespec.autoregressive(target, PROMPTS[2], max_new_tokens=17)
    assert got.tokens == reference(target, PROMPTS[2], 17)
    assert got.target_passes == 17 and all(s.tree_size == 1 and s.accepted == 1 for s in got.steps)


@pytest.mark.parametrize("name", ["chain", "kary", "sequoia", "dynamic"])
def test_eos_mid_tree_stops_exactly(llama_pair, name):
    target, _ = llama_pair
    prompt = PROMPTS[0]
    free = reference(target, prompt, 30)
    # an EOS token whose first occurrence is well inside the output, so drafts run across it
    position = next(i for i in range(5, 30) if free[i] not in free[:i])
    eos = free[position]
    expected = reference(target, prompt, 30, eos=eos)
    assert expected[-1] == eos and len(expected) == position + 1
    got = treespec.generate(target, target, prompt, tree=all_policies()[name], max_new_tokens=30, eos_token_id=eos)
    assert got.tokens == expected
    assert got.stop_reason == "eos"


def test_eos_from_generation_config(llama_pair):
    target, draft = llama_pair
    free = reference(target, PROMPTS[1], 20)
    eos = free[6]
    target.generation_config.eos_token_id = eos
    try:
        got = treespec.generate(target, draft, PROMPTS[1], tree=policies.Chain(3), max_new_tokens=20)
    finally:
        target.generation_config.eos_token_id = None
    assert got.tokens == free[: free.index(eos) + 1]


@pytest.mark.parametrize("max_new", [1, 2, 3, 7, 11])
def test_max_new_tokens_exact_mid_tree(llama_pair, max_new):
    target, _ = llama_pair
    got = treespec.generate(target, target, PROMPTS[0], tree=policies.Chain(5), max_new_tokens=max_new)
    assert got.tokens == reference(target, PROMPTS[0], max_new)
    assert got.stop_reason == "max_new_tokens"


def test_sampling_respects_limits_and_seed(llama_pair):
    target, draft = llama_pair
    kwargs = dict(tree=policies.Sequoia([0.5, 0.2], budget=6), max_new_tokens=15, temperature=0.8, top_p=0.9, seed=3)
    a = treespec.generate(target, draft, PROMPTS[0], **kwargs)
    b = treespec.generate(target, draft, PROMPTS[0], **kwargs)
    assert a.tokens == b.tokens and len(a.tokens) == 15
    assert sum(s.accepted for s in a.steps) == 15


def test_generation_records_steps_and_timings(llama_pair):
    target, draft = llama_pair
    streamed = []
    got = treespec.generate(target, draft, PROMPTS[0], tree=policies.KAry([2, 2]), max_new_tokens=12,
                            streamer=streamed.extend)
    assert streamed == got.tokens
    for step in got.steps:
        assert 1 <= step.tree_size <= 7 and 1 <= step.tree_depth <= 3
        assert 1 <= step.accepted <= 3 and len(step.accepted_ranks) <= step.accepted
        assert min(step.draft_s, step.target_s, step.verify_s, step.commit_s) >= 0
    assert got.mean_accepted == pytest.approx(12 / got.target_passes)
    assert set(got.phase_seconds()) == {"prefill", "draft", "target", "verify", "commit"}
    assert got.policy["policy"] == "kary"


class _Untouchable(torch.nn.Module):
    """Stands in for a model whose forward must not run: bad input has to fail before model work."""

    def __init__(self, model):
        super().__init__()
        self.inner = model
        self.config, self.generation_config = model.config, model.generation_config

    def forward(self, *args, **kwargs):
        raise AssertionError("model work started before the input was checked")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(input_ids=[]), "prompt is empty"),
        (dict(max_new_tokens=300), "exceeds the target's context"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(temperature=-0.5), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(tree="chain"), "tree must be"),
    ],
)
def test_bad_input_fails_fast(llama_pair, kwargs, message):
    target, draft = llama_pair
    args = dict(input_ids=[1, 2, 3], tree=policies.Chain(2), max_new_tokens=10)
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        treespec.generate(_Untouchable(target), _Untouchable(draft), args.pop("input_ids"), **args)


def test_vocabulary_mismatch_fails_fast(llama_pair):
    target, _ = llama_pair
    other = tiny_model("llama", seed=2, vocab=48)
    with pytest.raises(ConfigError, match="vocabulary"):
        treespec.generate(_Untouchable(target), _Untouchable(other), [1, 2], tree=policies.Chain(2), max_new_tokens=4)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: policies.Sequoia([0.5, 0.2], budget=0), "budget"),
        (lambda: policies.Sequoia([0.5, 0.2], budget=8, max_depth=0), "max_depth"),
        (lambda: policies.Sequoia([0.5, -0.1], budget=8), ">= 0"),
        (lambda: policies.Sequoia([0.7, 0.4], budget=8), "sum to at most 1"),
        (lambda: policies.Dynamic(budget=0, depth=3), "budget"),
        (lambda: policies.Dynamic(budget=8, depth=0), "depth"),
        (lambda: policies.KAry([2, 0]), "widths"),
    ],
)
def test_bad_tree_arguments(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_needs_draft_unless_autoregressive(llama_pair):
    target, _ = llama_pair
    with pytest.raises(ConfigError, match="needs a draft"):
        treespec.generate(_Untouchable(target), None, [1, 2], tree=policies.Chain(2), max_new_tokens=4)
