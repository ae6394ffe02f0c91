"""Logits processing and the random draws."""

import numpy as np
import pytest
import torch
from scipy import stats

from treespec.decode.sampling import NUMPY_TOP_K, SamplingConfig, argmax_tokens, gumbel_top_k, probabilities, top_tokens
from treespec.errors import ConfigError


def test_greedy_is_one_hot_argmax():
    probs = probabilities(torch.tensor([[0.1, 2.0, -1.0]]), SamplingConfig())
    assert probs.tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_argmax_tokens_is_torch_argmax_with_the_first_of_tied_maxima(dtype):
    logits = torch.randn(2, 5, 300, generator=torch.Generator().manual_seed(0)).to(dtype)
    logits[0, 1, [7, 40, 299]] = 50.0  # tied maxima: the first one wins, as torch.argmax documents
    logits[1, 3, :] = 0.0  # all tied
    got = argmax_tokens(logits)
    assert got == logits.argmax(-1).tolist()
    assert got[0][1] == 7 and got[1][3] == 0
    assert argmax_tokens(logits[1, 2]) == int(logits[1, 2].argmax()) and isinstance(argmax_tokens(logits[1, 2]), int)
    strided = logits[0, :, ::3]  # a view that is not contiguous
    assert argmax_tokens(strided) == strided.argmax(-1).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_top_tokens_are_torch_topk_largest_first(dtype):
    values = torch.randn(500, generator=torch.Generator().manual_seed(1)).to(dtype)
    for k in (1, 3, NUMPY_TOP_K, NUMPY_TOP_K + 2):
        assert top_tokens(values, k) == values.topk(k).indices.tolist()
    assert top_tokens(values[:4], 10) == values[:4].topk(4).indices.tolist()  # k capped at V
    assert top_tokens(values, 0) == []
    before = values.clone()
    tied = torch.zeros(6, dtype=dtype)
    tied[[1, 4]] = 2.0
    assert top_tokens(tied, 2) == [1, 4] and top_tokens(tied, 3) == [1, 4, 0]  # first index among equal values
    assert torch.equal(values, before)  # the row itself is not masked


def test_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    torch.testing.assert_close(probabilities(logits, SamplingConfig(1.0)), torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    hot = probabilities(logits, SamplingConfig(2.0))
    torch.testing.assert_close(hot, torch.softmax(logits / 2, -1))
    top2 = probabilities(logits, SamplingConfig(1.0, top_k=2))
    torch.testing.assert_close(top2, torch.tensor([5 / 7, 2 / 7, 0, 0, 0]))
    nucleus = probabilities(logits, SamplingConfig(1.0, top_p=0.8))  # 0.5 + 0.2 < 0.8 <= 0.85
    torch.testing.assert_close(nucleus, torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85)
    tiny = probabilities(logits, SamplingConfig(1.0, top_p=0.01))  # always keeps the top token
    assert tiny.tolist() == [1.0, 0, 0, 0, 0]


@pytest.mark.parametrize("kwargs, message", [(dict(temperature=-1), "temperature"), (dict(top_p=0), "top_p"),
                                             (dict(top_p=1.01), "top_p"), (dict(top_k=-2), "top_k")])
def test_invalid_configs(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SamplingConfig(**kwargs)


def test_gumbel_top_k_samples_without_replacement():
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0])
    g = torch.Generator().manual_seed(0)
    firsts, seconds = np.zeros(5), np.zeros(5)
    trials = 6000
    for _ in range(trials):
        a, b = gumbel_top_k(probs, 2, g).tolist()
        assert a != b and 4 not in (a, b)
        firsts[a] += 1
        seconds[b] += 1
    assert stats.chisquare(firsts[:4], trials * probs[:4].double().numpy() / probs[:4].double().sum().item()).pvalue > 1e-3
    # second draw: P(b) = sum_a p_a * p_b / (1 - p_a)
    p = probs[:4].double().numpy()
    expected = np.array([sum(p[a] * p[b] / (1 - p[a]) for a in range(4) if a != b) for b in range(4)])
    assert stats.chisquare(seconds[:4], trials * expected / expected.sum()).pvalue > 1e-3
    assert len(gumbel_top_k(probs, 9, g)) == 4  # never proposes tokens with q = 0
