"""Losslessness end to end, on the certificate harness (treespec.certify): with a 6-token vocabulary the exact
law of the first L = 4 new tokens is enumerated from the target alone; thousands of seeded speculative runs
must match it (joint chi-square plus one conditional test per position, Holm-corrected). Trees have 3
levels, so L = 4 reaches tokens produced *after* a commit: the runs must include steps that accepted a
non-first sibling (a non-contiguous gather of cache slots) or their whole depth plus the bonus, and then
went on. `make certify` runs the full grid with the stated power (<= 10% detectable bias); this is its fast tier.
"""

import pytest

from treespec import policies
from treespec.decode.sampling import SamplingConfig
from treespec.eval import certify

V = 6
L = 4
PROMPT = [1, 4, 2]
RUNS = 2500


@pytest.fixture(scope="module")
def pair():
    # context-sensitive tiny models (see certify.tiny_lm); two seeds, so acceptance is neither ~0 nor ~1
    return certify.tiny_lm("llama", seed=10, vocab=V), certify.tiny_lm("llama", seed=11, vocab=V)


@pytest.fixture(scope="module")
def eagle_head(pair):
    return certify.eagle_head_for(pair[0], seed=3)


DP_TREE = dict(accept=[0.5, 0.2, 0.1], budget=7, max_depth=3)  # irregular: children (3, 2, 1) at the root's

CASES = {
    "dp tree, without replacement, T=1": (lambda: policies.Sequoia(**DP_TREE), SamplingConfig(1.0)),
    "paths, with replacement, T=0.7 top-p 0.9": (
        lambda: policies.Paths([(0,), (1,), (0, 0), (0, 1), (1, 0)], children="with_replacement"),
        SamplingConfig(0.7, top_p=0.9)),
    "dynamic, T=1.5 top-k 4": (lambda: policies.Dynamic(budget=10, depth=3, topk=4), SamplingConfig(1.5, top_k=4)),
}


def _check(verdict, events, runs, needed=("non-contiguous commit, then more", "full depth + bonus, then more")):
    assert verdict.passed, verdict
    for event in needed:
        assert events[event] >= 0.01 * runs, (event, dict(events))
    assert verdict.detectable_bias < 0.25  # the fast tier's power; make certify states <= 10%


@pytest.mark.parametrize("name", list(CASES))
def test_first_tokens_follow_the_target(pair, name):
    target, draft = pair
    make_tree, sampling = CASES[name]
    law = certify.target_law(target, PROMPT, L, sampling)
    decode = certify.EngineDecoder(target, draft, PROMPT, make_tree(), L, temperature=sampling.temperature,
                                   top_p=sampling.top_p, top_k=sampling.top_k)
    verdict = certify.run_case(decode, law, RUNS)
    _check(verdict, decode.events, RUNS)


def test_eagle_head_follows_the_target(pair, eagle_head):
    target, _ = pair
    law = certify.target_law(target, PROMPT, L, SamplingConfig(1.0))
    decode = certify.EngineDecoder(target, eagle_head, PROMPT, policies.Sequoia(**DP_TREE), L)
    verdict = certify.run_case(decode, law, RUNS)
    _check(verdict, decode.events, RUNS)


def test_eos_under_sampling(pair):
    target, draft = pair
    sampling = SamplingConfig(1.0)
    law = certify.target_law(target, PROMPT, L, sampling)
    first = law.level(0)[0]
    eos = int(abs(first - 0.25).argmin())  # a token emitted about a quarter of the time
    law = certify.target_law(target, PROMPT, L, sampling, eos_token_id=eos)
    decode = certify.EngineDecoder(target, draft, PROMPT, policies.Sequoia(**DP_TREE), L, eos_token_id=eos)
    verdict = certify.run_case(decode, law, RUNS, eos_token_id=eos)
    _check(verdict, decode.events, RUNS, needed=("eos", "non-contiguous commit, then more"))
    assert decode.events["eos"] >= 0.2 * RUNS


def test_a_commit_that_ignores_the_gather_is_rejected(pair, monkeypatch):
    """Control for the reach of L: a commit that keeps the first slots instead of the accepted path's
    (the classic bug) changes only tokens drawn after a non-contiguous commit, and is caught."""
    from treespec.decode import engine

    real_commit = engine.commit
    monkeypatch.setattr(engine, "commit", lambda cache, lengths, start, kept: real_commit(
        cache, lengths, start, [list(range(len(path))) for path in kept]))
    target, draft = pair
    law = certify.target_law(target, PROMPT, L, SamplingConfig(1.0))
    decode = certify.EngineDecoder(target, draft, PROMPT, policies.Sequoia(**DP_TREE), L)
    verdict = certify.run_case(decode, law, RUNS)
    assert not verdict.passed, verdict
