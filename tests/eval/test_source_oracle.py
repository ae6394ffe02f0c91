"""The sources' oracle (treespec.eval.source_oracle): walking step lengths, the best source per position, and the
step lengths measured from every position against the steps a real decode takes."""

import copy

import pytest
import torch
from conftest import PROMPTS, tiny_model

import treespec
from treespec import policies
from treespec.eval.source_oracle import best_of, oracle_summary, passes_needed, step_lengths


def test_passes_needed_walks_the_step_lengths():
    assert passes_needed([]) == 0
    assert passes_needed([1, 1, 1]) == 3
    assert passes_needed([3, 9, 9, 1]) == 2  # 0 -> 3 -> 4: positions 1 and 2 are never a pass's start
    assert passes_needed([0, 2, 5]) == 2  # a pass adds one token at least
    assert passes_needed([10]) == 1


def test_best_of_and_the_summary():
    lookup, head = [4, 3, 2, 1, 1, 1], [1, 1, 2, 3, 2, 1]
    assert best_of({"lookup": lookup, "head": head}) == [4, 3, 2, 3, 2, 1]
    with pytest.raises(ValueError, match="same positions"):
        best_of({"lookup": lookup, "head": head[:3]})
    summary = oracle_summary({"lookup": [lookup, [2, 1]], "head": [head, [1, 1]]})
    # lookup: 0 -> 4 -> 5 -> 6 (3 passes) + 1; head: 0 -> 1 -> 2 -> 4 -> 6 (4) + 2; best: 0 -> 4 -> 6 (2) + 1
    assert summary["passes"] == {"lookup": 4, "head": 6, "best": 3}
    assert summary["tokens"] == 8 and summary["tokens_per_pass"]["best"] == round(8 / 3, 3)
    assert summary["best_single"] == "lookup" and summary["best_saves"] == round(4 / 3, 3)
    with pytest.raises(ValueError, match="other than 'best'"):
        oracle_summary({"best": [lookup]})


@pytest.mark.parametrize("make_policy", [lambda: policies.Chain(3), lambda: policies.NGram(8, 6)])
def test_step_lengths_agree_with_a_real_decode(make_policy):
    """At every position where a decode's pass starts, the one-step run from there adds what that pass added."""
    target = tiny_model(seed=0)
    draft = copy.deepcopy(target)  # the target, perturbed: it agrees at some positions and not at others
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in draft.parameters():
            parameter.add_(0.01 * torch.randn(parameter.shape, generator=noise))
    prompt = PROMPTS[0] * 3  # repeats, so that prompt lookup finds matches
    reference = treespec.autoregressive(target, prompt, max_new_tokens=16).tokens
    lengths = step_lengths(target, draft, prompt, reference, make_policy(), longest=12)
    assert len(lengths) == len(reference) and all(1 <= n <= 12 for n in lengths) and len(set(lengths)) > 2
    decoded = treespec.generate(target, draft, prompt, tree=make_policy(), max_new_tokens=len(reference))
    assert decoded.tokens == reference
    position = 0
    for step in decoded.steps:
        assert step.accepted == lengths[position], position
        position += step.accepted
    assert passes_needed(lengths) == len(decoded.steps)
