"""Greedy parity when drafts are accepted: a self-draft (accepts everything), the same with every node's
siblings reversed (the draft's best guess becomes the last sibling, so every accepted node has rank > 0),
duplicate-token siblings (a leaf the drafter never forwarded, carrying the best token, ahead of its twin),
and a noisy copy of the target (agrees often, not always). Each test asserts that acceptances of depth >= 2
and of non-first siblings actually happened, so parity is not the trivial "reject everything" case.
Targets come from certify.tiny_lm (initialisation std 0.3): their greedy outputs depend on the context
(conftest's tiny GPT-2, whose tied embeddings are scaled, repeats the prompt's last token forever)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
import torch
from conftest import ARCHS

import treespec
from treespec import policies
from treespec.decode.tree import DraftTree, TreeShape
from treespec.eval.certify import tiny_lm

PROMPTS = ([3, 17, 5, 9], [42, 7])
NEW = 28


@dataclass(frozen=True)
class Rearranged:
    """Drafts with `base`, then rebuilds the tree breadth-first with every node's children reversed and,
    below depth 1 (`duplicate`), an extra leaf ahead of them holding the token of the draft's first choice."""

    base: object
    reverse: bool = True
    duplicate: bool = False
    name: str = "rearranged"
    seen: list = field(default_factory=list, compare=False)  # (tokens, parents) of every drafted tree

    def describe(self) -> dict:
        return {"policy": self.name}

    def draft(self, drafter, roots, sampling, generators, eos, max_levels) -> list[DraftTree]:
        return [self._rearranged(tree) for tree in self.base.draft(drafter, roots, sampling, generators, eos, max_levels)]

    def _rearranged(self, tree: DraftTree) -> DraftTree:
        old_tokens, shape = tree.tokens.tolist(), tree.shape
        old_ids = tree.drafter_ids if tree.drafter_ids is not None else tuple(range(shape.size))
        tokens, parents, ids, olds = [old_tokens[0]], [-1], [old_ids[0]], [0]
        i = 0
        while i < len(olds):
            old = olds[i]
            kids = list(shape.children[old]) if old is not None else []
            if self.reverse:
                kids.reverse()
            if kids and self.duplicate and shape.depths[old] >= 1:
                tokens.append(old_tokens[shape.children[old][0]])
                parents.append(i)
                ids.append(-10_000 - len(ids))  # never forwarded by the drafter
                olds.append(None)
            for kid in kids:
                tokens.append(old_tokens[kid])
                parents.append(i)
                ids.append(old_ids[kid])
                olds.append(kid)
            i += 1
        self.seen.append((tuple(tokens), tuple(parents)))
        return DraftTree(torch.tensor(tokens, device=tree.tokens.device), TreeShape(tuple(parents)), None,
                         tree.verify_mode, tuple(ids))


def _target(arch):
    return tiny_lm(arch, seed=0, vocab=64, hidden=32, layers=2)


def reference(target, prompt, max_new_tokens):
    out = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def base_policies():
    return {
        "kary": policies.KAry([3, 2, 1]),
        "sequoia": policies.Sequoia([0.55, 0.2, 0.1, 0.05], budget=12, max_depth=5),
        "dynamic": policies.Dynamic(budget=10, depth=5, topk=3),
    }


def _decode_all(target, draft, make_tree):
    steps = []
    for prompt in PROMPTS:
        got = treespec.generate(target, draft, prompt, tree=make_tree(), max_new_tokens=NEW)
        assert got.tokens == reference(target, prompt, NEW), prompt
        steps += got.steps
    return steps


def _depth2(steps):
    return sum(len(s.accepted_ranks) >= 2 for s in steps)


def _non_first(steps):
    return sum(any(r > 0 for r in s.accepted_ranks) for s in steps)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", list(base_policies()))
def test_self_draft_with_reversed_siblings(arch, name):
    target = _target(arch)
    steps = _decode_all(target, target, lambda: Rearranged(base_policies()[name]))
    assert _depth2(steps) >= 3 and _non_first(steps) >= 3, [s.accepted_ranks for s in steps]
    # every accepted node below a multi-child parent is now a later sibling
    assert any(all(r > 0 for r in s.accepted_ranks[:1]) and len(s.accepted_ranks) >= 2 for s in steps)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["kary", "sequoia", "dynamic"])
def test_duplicate_token_siblings(arch, name):
    target = _target(arch)
    policy_log = []

    def make():
        policy = Rearranged(base_policies()[name], duplicate=True)
        policy_log.append(policy)
        return policy

    steps = _decode_all(target, target, make)
    # the best token sits twice under every depth >= 1 node; the first copy, a leaf the drafter never saw, wins
    duplicated = [s for s in steps if len(s.accepted_ranks) == 2 and s.accepted_ranks[1] == 0]
    assert len(duplicated) >= 3 and _non_first(steps) >= 3, [s.accepted_ranks for s in steps]
    assert any(len(set(tokens[1:])) < len(tokens) - 1 for policy in policy_log for tokens, _ in policy.seen)


def noisy_copy(model, scale, seed):
    noisy = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(scale * p.std().nan_to_num(0.0) * torch.randn(p.shape, generator=g))
    return noisy


@pytest.mark.parametrize("arch", ARCHS)
def test_noisy_draft(arch):
    target = _target(arch)
    draft = noisy_copy(target, 0.1, seed=1)
    steps = []
    for tree in base_policies().values():
        steps += _decode_all(target, draft, lambda tree=tree: tree)
    assert _depth2(steps) >= 3 and _non_first(steps) >= 3, [s.accepted_ranks for s in steps]
