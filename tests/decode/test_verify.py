"""Verification rules: the token emitted at a node is distributed exactly as p (chi-square, pinned seeds)."""

import numpy as np
import pytest
import torch
from scipy import stats

from treespec.decode.sampling import gumbel_top_k, sample_with_replacement
from treespec.decode.verify import verify

V = 8


def chi2_pvalue(counts, probs):
    """Chi-square goodness of fit of counts to probs over the tokens with probs > 0."""
    probs = np.asarray(probs, dtype=np.float64)
    support = probs > 0
    expected = counts.sum() * probs[support] / probs[support].sum()
    return stats.chisquare(counts[support], expected).pvalue


def _distributions(seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=g) ** 2
    q = torch.rand(V, generator=g) ** 2
    p[3] = 0.0  # a token the target never emits
    q[5] = 0.0  # a token the draft never proposes
    return (p / p.sum()).double(), (q / q.sum()).double()


def _emitted_token_counts(mode, p, q, k, trials, seed):
    """Draft k children at a root, verify, count the first emitted token."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(V)
    target = torch.stack([p] * (k + 1))
    draft = torch.stack([q] * (k + 1))
    for _ in range(trials):
        if mode == "without_replacement":
            kids = gumbel_top_k(q, k, g).tolist()
        elif mode == "with_replacement":
            kids = sample_with_replacement(q, k, g).tolist()
        else:
            kids = q.topk(k).indices.tolist()
        tokens = [0] + kids
        local_children = [list(range(1, len(kids) + 1))] + [[] for _ in kids]
        result = verify(tokens, local_children, target, draft, mode, g)
        first = tokens[result.accepted[1]] if len(result.accepted) > 1 else result.bonus
        counts[first] += 1
    return counts


@pytest.mark.parametrize("mode", ["without_replacement", "with_replacement", "deterministic"])
@pytest.mark.parametrize("k, seed", [(1, 0), (3, 1), (6, 2)])
def test_emitted_token_is_distributed_as_p(mode, k, seed):
    p, q = _distributions(seed)
    counts = _emitted_token_counts(mode, p, q, k, 20000, seed + 100)
    assert counts[3] == 0  # never emits a token with p = 0
    assert chi2_pvalue(counts, p.numpy()) > 1e-3, (mode, k, counts / counts.sum(), p)


def test_a_wrong_rule_is_detected():
    """The same statistic rejects a subtly wrong rule (accept with probability p instead of min(1, p/q))."""
    p, q = _distributions(0)
    g = torch.Generator().manual_seed(5)
    counts = np.zeros(V)
    trials = 6000
    for _ in range(trials):
        x = int(torch.multinomial(q, 1, generator=g))
        counts[x if torch.rand((), generator=g, dtype=torch.float64) < p[x] else int(torch.multinomial(p, 1, generator=g))] += 1
    assert chi2_pvalue(counts, p.numpy()) < 1e-6


def test_greedy_walks_the_argmax_path():
    tokens = [0, 4, 5, 6, 7]
    children = [[1, 2], [3], [4], [], []]
    target = torch.zeros(5, V)
    target[0, 5] = 1  # root wants 5 -> node 2
    target[2, 7] = 1  # node 2 wants 7 -> node 4
    target[4, 1] = 1  # leaf: bonus 1
    result = verify(tokens, children, target, None, "greedy")
    assert result.accepted == (0, 2, 4) and result.bonus == 1
    target[2] = 0
    target[2, 3] = 1  # node 2 wants 3: no such child
    result = verify(tokens, children, target, None, "greedy")
    assert result.accepted == (0, 2) and result.bonus == 3


def test_identical_p_and_q_accept_the_first_child():
    p, _ = _distributions(3)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        kids = gumbel_top_k(p, 2, g).tolist()
        result = verify([0] + kids, [[1, 2], [], []], torch.stack([p] * 3), torch.stack([p] * 3),
                        "without_replacement", g)
        assert result.accepted == (0, 1)


def test_unknown_mode():
    with pytest.raises(ValueError, match="unknown verification mode"):
        verify([0], [[]], torch.ones(1, V) / V, None, "typo")
