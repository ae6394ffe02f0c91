"""Losslessness end to end: with an 8-token vocabulary the exact distribution of the first two generated
tokens is computed from the target alone; thousands of seeded speculative generations must match it."""

from itertools import product

import numpy as np
import pytest
import torch
from conftest import tiny_model
from scipy import stats

import treespec
from treespec import policies
from treespec.sampling import SamplingConfig, probabilities

V = 8
PROMPT = [1, 4, 2]
RUNS = 1500


@pytest.fixture(scope="module")
def pair():
    # moderately peaked target and a different draft, so that acceptance is neither ~0 nor ~1
    return (tiny_model("llama", seed=10, vocab=V, hidden=16, layers=1, sharpness=6.0),
            tiny_model("llama", seed=11, vocab=V, hidden=16, layers=1, sharpness=4.0))


def exact_first_two(target, sampling: SamplingConfig) -> np.ndarray:
    """P(x1, x2) under the processed target distribution, by enumeration: [V, V]."""
    with torch.no_grad():
        first = probabilities(target(torch.tensor([PROMPT])).logits[0, -1], sampling).double()
        seconds = target(torch.tensor([PROMPT + [x] for x in range(V)])).logits[:, -1]
        second = probabilities(seconds, sampling).double()
    return (first[:, None] * second).numpy()


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square over cells with expected count >= 5; the rest pooled into one cell."""
    counts, expected = counts.ravel(), probs.ravel() / probs.sum() * counts.sum()
    assert counts[expected == 0].sum() == 0, "emitted a sequence the target gives probability 0"
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep]).pvalue


CASES = {
    "sequoia": lambda: policies.KAry([3, 2]),
    "specinfer": lambda: policies.KAry([3, 2], children="with_replacement"),
    "deterministic": lambda: policies.KAry([3, 2], children="deterministic"),
    "dynamic": lambda: policies.Dynamic(budget=7, depth=3, topk=3),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.6, 1.0), (1.0, 0.8), (0.6, 0.8)])
def test_first_two_tokens_follow_the_target(pair, name, temperature, top_p):
    target, draft = pair
    exact = exact_first_two(target, SamplingConfig(temperature, top_p))
    counts = np.zeros((V, V))
    accepted_drafts = 0
    for run in range(RUNS):
        out = treespec.generate(target, draft, PROMPT, tree=CASES[name](), max_new_tokens=3,
                                temperature=temperature, top_p=top_p, seed=run)
        counts[out.tokens[0], out.tokens[1]] += 1
        accepted_drafts += out.steps[0].accepted - 1
    assert accepted_drafts > RUNS * 0.2, "the test needs drafts that are often accepted"
    assert chi2_pvalue(counts, exact) > 1e-3


def test_the_statistic_rejects_a_biased_sampler(pair):
    """Sanity check of the test's power: decoding from the draft alone is caught."""
    target, draft = pair
    sampling = SamplingConfig(1.0)
    exact = exact_first_two(target, sampling)
    biased = exact_first_two(draft, sampling)
    rng = np.random.default_rng(0)
    draws = rng.choice(V * V, size=RUNS, p=biased.ravel() / biased.sum())
    counts = np.bincount(draws, minlength=V * V).reshape(V, V).astype(float)
    for x1, x2 in product(range(V), range(V)):  # keep the zero-probability guard out of the way
        if exact[x1, x2] == 0:
            counts[x1, x2] = 0
    assert chi2_pvalue(counts, exact) < 1e-6
