"""The EAGLE-style head: drafter bookkeeping against a fresh recomputation, parity, training pieces."""

import pytest
import torch
from conftest import tiny_model

import treespec
from treespec import policies
from treespec.draft import StepOutcome
from treespec.eagle import EagleDrafter, causal_mask
from treespec.errors import ConfigError
from treespec.training import distill_data, train


@pytest.fixture(scope="module")
def target_and_head():
    target = tiny_model("llama", seed=0, layers=2)
    torch.manual_seed(5)
    head = train.init_eagle_from_target(target, list(range(0, 64, 2)))
    with torch.no_grad():  # move away from the identity-like init so that bookkeeping errors show
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, head.eval()


def _features(target, tokens):
    with torch.no_grad():
        return target.model(torch.tensor([tokens])).last_hidden_state[0]


def test_drafter_matches_a_fresh_recomputation(target_and_head):
    target, head = target_and_head
    prompt = [5, 9, 13, 2, 7]
    drafter = EagleDrafter(head, target, 64)
    with torch.no_grad():
        drafter.reset(prompt, _features(target, prompt[:-1]))
        drafter.root_logits(prompt[-1])
        drafter.node_logits([1, 2], [20, 21], [0, 0])
        drafter.node_logits([3], [22], [1])
        # accepted: root -> node 1 (20) -> node 3 (22); bonus 30; the target's features along that path
        sequence = prompt + [20, 22]
        path_features = _features(target, sequence)[len(prompt) - 1:]
        drafter.observe(StepOutcome((0, 1, 3), (prompt[-1], 20, 22), 30, path_features))
        got = drafter.root_logits(30)
        # fresh: every pair (f_{j-1}, x_j) of the whole sequence with the target's true features
        full = sequence + [30]
        feats = _features(target, full[:-1])
        positions = torch.arange(1, len(full))[None]
        hidden = head(feats[None], target.get_input_embeddings()(torch.tensor([full[1:]])), positions,
                      causal_mask(torch.tensor([len(full) - 1]), len(full) - 1, torch.float32))
        expected = head.expand_logits(head.reduced_logits(hidden[0, -1]))
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("tree", [policies.Chain(4), policies.KAry([3, 2]), policies.Dynamic(10, 5, 3)])
def test_greedy_parity_with_an_eagle_head(target_and_head, tree):
    target, head = target_and_head
    for prompt in ([3, 17, 5, 9], [42]):
        expected = target.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False)[0, len(prompt):].tolist()
        assert treespec.generate(target, head, prompt, tree=tree, max_new_tokens=20).tokens == expected


def test_head_for_another_width_is_refused(target_and_head):
    _, head = target_and_head
    with pytest.raises(ConfigError, match="width"):
        EagleDrafter(head, tiny_model("llama", hidden=48), 32)


@pytest.mark.parametrize("unroll", [1, 2])
def test_eagle_training_pieces_learn(unroll):
    target = tiny_model("llama", seed=0, vocab=32)
    prompts = [[(7 * i + j) % 32 for j in range(4)] for i in range(10)]
    records = distill_data.answer_batch(target, prompts, temperature=1.0, max_new_tokens=10, keep_top=8,
                                        eos_token_id=None, pad_token_id=0)
    shard = {k: [r[k] for r in records] for k in records[0]}
    shard["mode"] = ["t1"] * len(records)
    features = distill_data.target_features(target, shard["input_ids"])
    vocab = list(range(32))
    examples = train.make_examples(shard, vocab, max_len=64)
    batch = train.collate_eagle(examples, [features[e.index] for e in examples], pad_id=0)
    assert batch.features.shape[:2] == batch.input_ids.shape and batch.rows[:, 1].max() < batch.input_ids.shape[1]
    head = train.init_eagle_from_target(target, vocab)
    embed = target.get_input_embeddings()
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss, _, parts = train.eagle_loss(head, embed, batch, feature_noise=0.1, unroll=unroll,
                                          generator=torch.Generator().manual_seed(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0] and set(parts) == {"ce", "feature"}


def test_second_unrolled_level_is_what_a_depth_2_node_computes(target_and_head):
    target, head = target_and_head
    tokens = [5, 9, 13, 2, 7, 30, 11, 4]
    features = _features(target, tokens)  # F_i: the target's feature at token i
    embeds = target.get_input_embeddings()(torch.tensor([tokens[1:]]))
    with torch.no_grad():
        first, second = train.eagle_hidden(head, features[None, :-1], embeds, torch.tensor([len(tokens) - 1]),
                                           unroll=2)
        for j in (1, 3, 5):  # the node drafted for x_{j+1} below a root x_j
            drafter = EagleDrafter(head, target, 64)
            drafter.reset(tokens[: j + 1], features[:j])
            root = drafter.root_logits(tokens[j])
            node = drafter.node_logits([1], [tokens[j + 1]], [0])[0]
            ids = head.output_ids
            torch.testing.assert_close(root[ids], head.reduced_logits(first[0, j - 1]), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(node[ids], head.reduced_logits(second[0, j]), rtol=1e-4, atol=1e-4)

