"""Drafting from a vocabulary subset: the pure subset builder, the sliced head, greedy parity and
losslessness under sampling (the target still verifies over the full vocabulary)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ARCHS, PROMPTS, OneRow, all_policies, reference, tiny_model

import treespec
from treespec import policies
from treespec.decode.engine import StepOutcome
from treespec.decode.sampling import SamplingConfig
from treespec.drafters import CausalLMDrafter, make_drafter
from treespec.drafters.vocab import token_counts, vocab_subset
from treespec.errors import ConfigError
from treespec.eval import certify
from treespec.models import layouts

V = 8  # a vocabulary small enough to enumerate the first tokens' law
PROMPT = [1, 4, 2]
RUNS = 1500


def test_vocab_subset_ranks_by_frequency():
    counts = token_counts([[5, 5, 5, 2, 2, 7], [2, 9, 9, 9, 9]], vocab_size=12)
    assert counts.tolist() == [0, 0, 3, 0, 0, 3, 0, 1, 0, 4, 0, 0]
    assert vocab_subset(counts, 1).tolist() == [9]
    assert vocab_subset(counts, 3).tolist() == [2, 5, 9]  # 2 and 5 tie: both in, order by id
    assert vocab_subset(counts, 2).tolist() == [2, 9]  # tie broken towards the lower id
    assert vocab_subset(counts, 2, always=[11, 9]).tolist() == [2, 9, 11]
    assert vocab_subset(counts, 12).tolist() == list(range(12))
    with pytest.raises(ConfigError, match="size"):
        vocab_subset(counts, 0)
    with pytest.raises(ConfigError, match="always"):
        vocab_subset(counts, 2, always=[12])
    with pytest.raises(ConfigError, match="token ids"):
        token_counts([[3, 12]], vocab_size=12)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("layout", ["standard", "onednn"])
def test_subset_logits_are_the_full_logits_restricted(arch, layout):
    """Root and node logits equal the full head's on S and are -inf elsewhere, through a commit; with the draft's
    weights reordered for oneDNN, the sliced head multiplies through a reordered copy of its own."""
    if layout == "onednn" and not layouts.onednn_available():
        pytest.skip("this torch build has no oneDNN")
    draft = layouts.set_linear_layout(tiny_model(arch, seed=1, layers=1), layout)
    vocab = torch.tensor([0, 3, 4, 10, 17, 40, 63])
    full, sub = OneRow(CausalLMDrafter(draft, 64)), OneRow(CausalLMDrafter(draft, 64, vocab))
    assert (sub.drafter.subset.onednn is not None) == (layout == "onednn")
    outside = torch.ones(64, dtype=torch.bool)
    outside[vocab] = False
    with torch.inference_mode():
        for d in (full, sub):
            d.reset([3, 17, 5, 9])
        steps = [lambda d: d.root_logits(9)[None], lambda d: d.node_logits([1, 2], [4, 10], [0, 0]),
                 lambda d: d.node_logits([3], [17], [1])]
        for step in steps:
            a, b = step(full), step(sub)
            assert torch.allclose(b[:, vocab], a[:, vocab], atol=1e-5)
            assert torch.isneginf(b[:, outside]).all()
        for d in (full, sub):
            d.observe(StepOutcome((0, 1, 3), (9, 4, 17), bonus=5))
        a, b = full.root_logits(5), sub.root_logits(5)
        assert torch.allclose(b[vocab], a[vocab], atol=1e-5) and torch.isneginf(b[outside]).all()


def test_subset_rejects_bad_ids(llama_pair):
    target, draft = llama_pair
    for bad, message in [([1, 1, 2], "distinct"), ([0, 64], "outside"), ([], "non-empty")]:
        with pytest.raises(ConfigError, match=message):
            make_drafter(draft, target, 32, torch.tensor(bad, dtype=torch.long))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_parity_with_a_subset(arch):
    target = tiny_model(arch, seed=0)
    draft = tiny_model(arch, seed=1, layers=1)
    vocab = torch.arange(0, 64, 2)  # half the vocabulary: the target's greedy tokens often lie outside it
    for prompt in PROMPTS[:2]:
        expected = reference(target, prompt, 20)
        for name, tree in all_policies().items():
            got = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=20, draft_vocab=vocab)
            assert got.tokens == expected, (arch, name, prompt)
            drafted = [t for s in got.steps for t in s.accepted_ranks]
            assert sum(s.accepted for s in got.steps) == 20 and len(drafted) <= 20


@pytest.fixture(scope="module")
def pair():
    # moderately peaked target, a different draft: acceptance neither ~0 nor ~1
    return (tiny_model("llama", seed=10, vocab=V, hidden=16, layers=1, sharpness=6.0),
            tiny_model("llama", seed=11, vocab=V, hidden=16, layers=1, sharpness=4.0))


@pytest.mark.parametrize("children", ["without_replacement", "with_replacement"])
def test_first_two_tokens_follow_the_target_with_a_subset(pair, children):
    target, draft = pair
    sampling = SamplingConfig(1.0)
    law = certify.target_law(target, PROMPT, 2, sampling)  # exact law of the first two tokens
    vocab = vocab_subset(torch.tensor(law.level(0)[0] * 1000).round(), 5)  # the target's 5 likeliest first tokens
    runs, accepted_drafts = [], 0
    for run in range(RUNS):
        out = treespec.generate(target, draft, PROMPT, tree=policies.KAry([3, 2], children=children),
                                max_new_tokens=3, temperature=1.0, seed=run, draft_vocab=vocab)
        runs.append(out.tokens[:2])
        accepted_drafts += out.steps[0].accepted - 1
    outside = np.ones(V, dtype=bool)
    outside[vocab.numpy()] = False
    assert accepted_drafts > RUNS * 0.2, "the test needs drafts that are often accepted"
    assert sum(outside[t[0]] for t in runs) > 10, "tokens outside S come only from the residual: the test must see some"
    verdict = certify.certify(certify.pad_runs(runs, law), law)
    assert verdict.passed, verdict.tests


def test_subset_head_keeps_the_transposed_layout():
    from treespec.models.layouts import transpose_linear_storage

    draft = transpose_linear_storage(tiny_model("llama", seed=1, layers=1))
    vocab = torch.tensor([1, 5, 9, 33])
    drafter = CausalLMDrafter(draft, 32, vocab)
    assert drafter.subset.weight.t().is_contiguous() and not drafter.subset.weight.is_contiguous()
    assert torch.equal(drafter.subset.weight, draft.lm_head.weight[vocab])


def test_the_sliced_head_is_built_once_per_head_and_vocabulary():
    draft = tiny_model("llama", seed=1, layers=1)
    vocab = torch.tensor([1, 5, 9, 33])
    first, again = CausalLMDrafter(draft, 32, vocab), CausalLMDrafter(draft, 32, vocab.clone())
    assert again.subset.weight is first.subset.weight  # reused: building it is slow for large heads
    assert CausalLMDrafter(draft, 32, torch.tensor([1, 5, 9])).subset.weight.shape[0] == 3  # another vocabulary: rebuilt
    with torch.no_grad():
        draft.lm_head.weight.mul_(2)  # changed in place: rebuilt from the new values
    changed = CausalLMDrafter(draft, 32, vocab)
    assert changed.subset.weight is not first.subset.weight and torch.equal(changed.subset.weight, draft.lm_head.weight[vocab])
