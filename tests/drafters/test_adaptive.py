"""The confidence-stopped policy: where it stops, greedy parity, losslessness under sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import ARCHS, PROMPTS, reference, tiny_model

import treespec
from treespec import policies
from treespec.decode.sampling import SamplingConfig
from treespec.errors import ConfigError
from treespec.eval import certify

V = 8  # a vocabulary small enough to enumerate the first tokens' law
PROMPT = [1, 4, 2]
RUNS = 1500


class ScriptedDrafter:
    """Every node's draft puts probability `top` on token (depth + 1) and spreads the rest evenly."""

    wants_target_hidden = False

    def __init__(self, top: float, vocab: int = 16):
        self.top, self.vocab, self.forwards = top, vocab, []

    def _logits(self, depth: int) -> torch.Tensor:
        probs = torch.full((self.vocab,), (1 - self.top) / (self.vocab - 1))
        probs[depth + 1] = self.top
        return probs.log()

    def root_logits(self, roots):
        self.depth = {0: 0}
        return self._logits(0)[None].expand(len(roots), -1)

    def node_logits(self, requests):
        (nodes, tokens, parents), = requests  # one row
        self.forwards.append(list(tokens))
        for node, parent in zip(nodes, parents):
            self.depth[node] = self.depth[parent] + 1
        return [torch.stack([self._logits(self.depth[n]) for n in nodes])]


def draft_one(policy, drafter, eos=(), max_levels=99):
    """The policy's tree for one row (root token 0, greedy)."""
    return policy.draft(drafter, [0], SamplingConfig(), [None], eos, [max_levels])[0]


@pytest.mark.parametrize("threshold, drafted", [(0.7, 4), (0.8, 3), (0.89, 2), (0.95, 1), (0.0, 7), (0.45, 7)])
def test_stops_when_the_chain_probability_drops_below_the_threshold(threshold, drafted):
    # chain probabilities 0.9, 0.81, 0.729, 0.656, ...: the token that falls below the threshold is the last one
    drafter = ScriptedDrafter(0.9)
    tree = draft_one(policies.Adaptive(max_depth=8, threshold=threshold), drafter)
    assert tree.tokens.tolist() == list(range(drafted + 1))
    assert tree.shape.parents == tuple(range(-1, drafted))
    assert len(drafter.forwards) == drafted - 1  # one draft forward per level after the root's
    if drafted < 7:  # stopped by the threshold, not by max_depth: the last token took the chain below it
        assert 0.9 ** (drafted - 1) >= threshold > 0.9**drafted


@pytest.mark.parametrize("threshold, drafted", [(0.7, 7), (0.85, 7), (0.95, 1)])
def test_the_token_rule_stops_at_the_first_unsure_token(threshold, drafted):
    # every token has probability 0.9: the token rule never stops below 0.9 (the path rule stops at 0.7 after 4)
    drafter = ScriptedDrafter(0.9)
    tree = draft_one(policies.Adaptive(max_depth=8, threshold=threshold, stop="token"), drafter)
    assert tree.tokens.tolist() == list(range(drafted + 1)) and len(drafter.forwards) == drafted - 1
    assert policies.Adaptive(8, 0.5, stop="token").describe()["stop"] == "token"


def test_width_adds_side_leaves_and_limits_hold():
    drafter = ScriptedDrafter(0.9)
    tree = draft_one(policies.Adaptive(max_depth=4, threshold=0.0, width=3), drafter)
    assert tree.shape.parents == (-1, 0, 0, 0, 1, 1, 1, 4, 4, 4)  # the first child of each level continues
    assert tree.tokens.tolist()[1::3] == [1, 2, 3] and len(drafter.forwards) == 2
    short = draft_one(policies.Adaptive(max_depth=8, threshold=0.0), ScriptedDrafter(0.9), max_levels=3)
    assert short.shape.levels == 3
    eos = draft_one(policies.Adaptive(max_depth=8, threshold=0.0), ScriptedDrafter(0.9), eos={2})
    assert eos.tokens.tolist() == [0, 1, 2]  # an EOS is never expanded
    for bad in [dict(max_depth=0, threshold=0.5), dict(max_depth=3, threshold=1.5), dict(max_depth=3, threshold=0.5, width=0),
                dict(max_depth=3, threshold=0.5, children="nope"), dict(max_depth=3, threshold=0.5, stop="nope")]:
        with pytest.raises(ConfigError):
            policies.Adaptive(**bad)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_parity(arch):
    target = tiny_model(arch, seed=0)
    draft = tiny_model(arch, seed=1, layers=1)
    for prompt in PROMPTS:
        expected = reference(target, prompt, 24)
        depths = set()
        for tree in (policies.Adaptive(6, 0.5), policies.Adaptive(6, 0.0, width=2), policies.Adaptive(5, 0.9, width=3),
                     policies.Adaptive(6, 0.6, stop="token")):
            got = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=24)
            assert got.tokens == expected, (arch, tree, prompt)
            depths |= {s.tree_depth for s in got.steps}
        assert len(depths) > 1, "the stop must vary with the context"


def test_self_draft_runs_to_full_depth(llama_pair):
    target, _ = llama_pair
    got = treespec.generate(target, target, PROMPTS[0], tree=policies.Adaptive(5, 0.0), max_new_tokens=25)
    assert got.tokens == reference(target, PROMPTS[0], 25)
    assert [s.accepted for s in got.steps] == [5] * 5


@pytest.fixture(scope="module")
def pair():
    # moderately peaked target, a different draft: acceptance neither ~0 nor ~1
    return (tiny_model("llama", seed=10, vocab=V, hidden=16, layers=1, sharpness=6.0),
            tiny_model("llama", seed=11, vocab=V, hidden=16, layers=1, sharpness=4.0))


@pytest.mark.parametrize("children, width, stop", [("without_replacement", 2, "path"), ("with_replacement", 1, "path"),
                                                   ("without_replacement", 1, "token")])
def test_first_two_tokens_follow_the_target(pair, children, width, stop):
    target, draft = pair
    sampling = SamplingConfig(0.8)
    law = certify.target_law(target, PROMPT, 2, sampling)  # exact law of the first two tokens
    runs, accepted_drafts, depths = [], 0, []
    for run in range(RUNS):
        out = treespec.generate(target, draft, PROMPT, tree=policies.Adaptive(4, 0.35, width, children, stop),
                                max_new_tokens=3, temperature=0.8, seed=run)
        runs.append(out.tokens[:2])
        accepted_drafts += out.steps[0].accepted - 1
        depths.append(out.steps[0].tree_depth)
    assert accepted_drafts > RUNS * 0.2, "the test needs drafts that are often accepted"
    assert min(np.bincount(depths)[2:4]) > RUNS * 0.05, "the test needs both early and late stops"
    verdict = certify.certify(certify.pad_runs(runs, law), law)
    assert verdict.passed, verdict.tests
