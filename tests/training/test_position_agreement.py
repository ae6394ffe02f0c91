"""Position agreement: the replayed spine decode is measure_acceptance's, and the teacher-forced split adds up."""

import copy

import numpy as np
import pytest
import torch
from conftest import tiny_model

from treespec.api import autoregressive
from treespec.models.eagle_head import init_eagle_from_target
from treespec.plan.acceptance import measure_acceptance
from treespec.training import distill_data, train
from treespec.training.position_agreement import PositionAgreement, position_agreement, spine_walk, teacher_forced_proposals

PROMPTS = [[5, 9, 13, 2, 7], [3, 3, 8], [40, 12, 6, 6, 21, 9, 1]]


def test_spine_walk_by_hand():
    """Sequence x_0..x_9, root x_1, 8 new tokens, spine width 2 depth 2: each pass's outcome set by hand."""
    tokens = torch.tensor([0, 1, 10, 11, 12, 13, 14, 15, 16, 17])
    proposals = torch.full((2, 10, 2), 99)
    proposals[0, :, 0] = tokens  # depth 1 rank 0 right everywhere ...
    proposals[0, 4, 0], proposals[0, 4, 1] = 98, 12  # ... but at x_4 (rank 1 there)
    proposals[1, :, 1] = tokens  # depth 2 only ever right at rank 1
    walk = spine_walk(proposals, tokens, root=1, new_tokens=8, max_new_tokens=8)
    # pass 1 root x_1: d1 x_2 rank 0, d2 x_3 rank 1 -> +3 (x_2..x_4); pass 2 root x_4: d1 x_5 rank 0, d2 x_6 rank 1
    # -> +3 (x_5..x_7); pass 3 root x_7: one level left (8 - 6 - 1), d1 x_8 rank 0 -> +2, the last pass (not counted)
    assert walk.roots == [1, 4] and walk.passes == 3 and walk.new_tokens == 8
    np.testing.assert_array_equal(walk.counts, [[2, 0], [0, 2]])
    np.testing.assert_array_equal(walk.observations, [2, 2])
    agreement = position_agreement(proposals, tokens, 1, 8, 8, vocabulary=[10, 11, 12, 13, 14, 15, 16])
    assert agreement.at_starts.tolist() == [2, 2]  # x_2 and x_5 start passes, both right at rank 0
    assert agreement.elsewhere.tolist() == [5, 6]  # x_3 x_4 x_6 x_7 x_8 x_9: all but x_4
    assert agreement.level.tolist() == [[7, 8], [0, 7]] and agreement.in_vocabulary.tolist() == [7, 8]


def test_a_walk_past_the_tokens_is_refused():
    with pytest.raises(ValueError, match="fewer than root"):
        spine_walk(torch.zeros(1, 4, 2, dtype=torch.long), torch.arange(4), root=1, new_tokens=3, max_new_tokens=3)


def _noisy_copy(model, scale, seed):
    draft = copy.deepcopy(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn_like(p))
    return draft.eval()


def _eagle_head(target):
    """A fused head trained for 60 steps on the target's answers to PROMPTS (agreeing often enough to test with)."""
    layers, vocab = [1, 2, 3], list(range(0, 64, 2)) + [1, 3, 5, 7]
    records = distill_data.answer_batch(target, PROMPTS * 2, temperature=1.0, max_new_tokens=24, keep_top=8,
                                        eos_token_id=None, pad_token_id=0)
    shard = {k: [r[k] for r in records] for k in records[0]}
    shard["mode"] = ["greedy"] * len(records)
    features = distill_data.target_features(target, shard["input_ids"], feature_layers=layers)
    examples = train.make_examples(shard, vocab, max_len=64)
    batch = train.collate_eagle(examples, [features[e.index] for e in examples], pad_id=0)
    torch.manual_seed(3)
    head = init_eagle_from_target(target, vocab, feature_layers=layers)
    embed = target.get_input_embeddings()
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    for _ in range(60):
        loss = train.eagle_loss(head, embed, batch, unroll=3)[0]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()


@pytest.mark.parametrize("kind", ["plain", "eagle"])
def test_the_replayed_decode_counts_what_measure_acceptance_counts(kind):
    target = tiny_model("llama", seed=0, layers=3)
    draft = _noisy_copy(target, 0.3, seed=2) if kind == "plain" else _eagle_head(target)
    width, depth, max_new = 4, 3, 24
    measured = measure_acceptance(target, draft, PROMPTS, width=width, depth=depth, max_new_tokens=max_new)
    total = PositionAgreement.empty(depth, width)
    for prompt in PROMPTS:
        generated = autoregressive(target, prompt, max_new_tokens=max_new).tokens
        tokens = torch.tensor(prompt + generated)
        proposals = teacher_forced_proposals(target, draft, tokens, depth, width)
        total = total + position_agreement(proposals, tokens, len(prompt) - 1, len(generated), max_new,
                                           getattr(draft.config, "output_token_ids", None))
    assert total.observations.tolist() == measured.observations
    np.testing.assert_allclose(total.counts / np.maximum(total.observations, 1)[:, None], measured.matrix, atol=1e-12)
    assert total.passes == measured.settings["target_passes"] and total.new_tokens == measured.settings["new_tokens"]
    assert total.counts[0, 0] > 0 and total.observations[2] > 0  # the comparison saw accepted drafts
    summary = total.summary()
    assert summary["pass_starts"] == total.observations[0]  # every counted pass observes depth 1
    assert summary["pass_starts"] + summary["positions_elsewhere"] == total.new_tokens
    assert summary["walk_p1_by_depth"][0] == pytest.approx(total.at_starts[0] / total.at_starts[1], abs=1e-4)
    if kind == "plain":
        assert summary["in_draft_vocabulary"] == 1.0
    else:
        assert 0 < summary["in_draft_vocabulary"] < 1  # the head proposes from 36 of 64 tokens
