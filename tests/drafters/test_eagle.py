"""The EAGLE-style head: drafter bookkeeping against a fresh recomputation, parity, training pieces."""

import copy
import json

import pytest
import torch
from conftest import OneRow, tiny_model

import treespec
from treespec import policies
from treespec.decode.engine import StepOutcome
from treespec.decode.mask import additive, causal_mask
from treespec.drafters import EagleDrafter
from treespec.errors import ConfigError
from treespec.models import load_model
from treespec.models.eagle_head import (
    EagleDraftConfig,
    EagleDraftModel,
    init_eagle_from_target,
    set_output_dtype,
    target_features,
)
from treespec.training import distill_data, train


@pytest.fixture(scope="module")
def target_and_head():
    target = tiny_model("llama", seed=0, layers=2)
    torch.manual_seed(5)
    head = init_eagle_from_target(target, list(range(0, 64, 2)))
    with torch.no_grad():  # move away from the identity-like init so that bookkeeping errors show
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, head.eval()


def _features(target, tokens):
    with torch.no_grad():
        return target.model(torch.tensor([tokens])).last_hidden_state[0]


def _root_and_children(head, target, prompt, features):
    """(root logits, logits of two children of the root drafting tokens 20 and 21) for `prompt`."""
    with torch.no_grad():
        drafter = OneRow(EagleDrafter(head, target, 64))
        drafter.reset(prompt, features)
        return drafter.root_logits(prompt[-1]), drafter.node_logits([1, 2], [20, 21], [0, 0])


def _train_steps(head, embed, batch, unroll, steps=25):
    """`steps` AdamW steps of train.eagle_loss on one batch: (losses, the last step's logits, its loss parts)."""
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        loss, logits, parts = train.eagle_loss(head, embed, batch, feature_noise=0.1, unroll=unroll,
                                               generator=torch.Generator().manual_seed(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, logits, parts


def test_drafter_matches_a_fresh_recomputation(target_and_head):
    target, head = target_and_head
    prompt = [5, 9, 13, 2, 7]
    drafter = OneRow(EagleDrafter(head, target, 64))
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


@pytest.mark.parametrize("unroll", [1, 2, 3])
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
    head = init_eagle_from_target(target, vocab)
    embed = target.get_input_embeddings()
    losses, _, parts = _train_steps(head, embed, batch, unroll)
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
            drafter = OneRow(EagleDrafter(head, target, 64))
            drafter.reset(tokens[: j + 1], features[:j])
            root = drafter.root_logits(tokens[j])
            node = drafter.node_logits([1], [tokens[j + 1]], [0])[0]
            ids = head.output_ids
            torch.testing.assert_close(root[ids], head.reduced_logits(first[0, j - 1]), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(node[ids], head.reduced_logits(second[0, j]), rtol=1e-4, atol=1e-4)



# ----------------------------------------------------------------------------------------------------
# Fused-feature heads (EAGLE-3): low, mid and top target layers through one projection
# ----------------------------------------------------------------------------------------------------

FUSED = [1, 2, 3]  # of a 3-layer target: after layers 1 and 2 (through the final norm) and the last hidden state


@pytest.fixture(scope="module")
def target_and_fused_head():
    target = tiny_model("llama", seed=0, layers=3)
    torch.manual_seed(6)
    head = init_eagle_from_target(target, list(range(0, 64, 2)), feature_layers=FUSED)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, head.eval()


@pytest.fixture(scope="module")
def target_and_deep_head():
    """A fused head with two decoder layers (draft.eagle_layers=2)."""
    target = tiny_model("llama", seed=0, layers=3)
    torch.manual_seed(8)
    head = init_eagle_from_target(target, list(range(0, 64, 2)), feature_layers=FUSED, layers=2)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return target, head.eval()


def _fused_features(target, tokens, layers=FUSED):
    with torch.no_grad():
        return target_features(target, target.model(torch.tensor([tokens]), output_hidden_states=True), layers)[0]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_target_features_are_the_normed_states_after_each_layer(arch):
    target = tiny_model(arch, seed=2, layers=3)
    tokens = [4, 8, 15, 16, 23, 42]
    with torch.no_grad():
        got = target_features(target, target.base_model(torch.tensor([tokens]), output_hidden_states=True), [0, 2, 3])[0]
    hidden = target.config.get_text_config().hidden_size
    for j, layer in enumerate([0, 2, 3]):
        truncated = copy.deepcopy(target)  # a target cut after `layer` layers: its last hidden state is that feature
        blocks = "layers" if arch == "llama" else "h"
        setattr(truncated.base_model, blocks, getattr(truncated.base_model, blocks)[:layer])
        with torch.no_grad():
            expected = truncated.base_model(torch.tensor([tokens])).last_hidden_state[0]
        torch.testing.assert_close(got[:, j * hidden:(j + 1) * hidden], expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        last = target.base_model(torch.tensor([tokens])).last_hidden_state
    assert torch.equal(target_features(target, target.base_model(torch.tensor([tokens])), []), last)


@pytest.mark.parametrize("heads", ["target_and_fused_head", "target_and_deep_head"])
def test_fused_drafter_matches_a_fresh_recomputation(heads, request):
    target, head = request.getfixturevalue(heads)
    prompt = [5, 9, 13, 2, 7]
    drafter = OneRow(EagleDrafter(head, target, 64))
    assert drafter.target_layers == tuple(FUSED)
    with torch.no_grad():
        drafter.reset(prompt, _fused_features(target, prompt[:-1]))
        drafter.root_logits(prompt[-1])
        drafter.node_logits([1, 2], [20, 21], [0, 0])
        drafter.node_logits([3, 4], [22, 23], [1, 2])
        sequence = prompt + [21, 23]  # accepted: root -> node 2 (21) -> node 4 (23); bonus 30
        drafter.observe(StepOutcome((0, 2, 4), (prompt[-1], 21, 23), 30, _fused_features(target, sequence)[len(prompt) - 1:]))
        got = drafter.root_logits(30)
        full = sequence + [30]
        feats = head.fuse_features(_fused_features(target, full[:-1]))
        hidden = head(feats[None], target.get_input_embeddings()(torch.tensor([full[1:]])), torch.arange(1, len(full))[None],
                      causal_mask(torch.tensor([len(full) - 1]), len(full) - 1, torch.float32))
        expected = head.expand_logits(head.reduced_logits(hidden[0, -1]))
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("heads", ["target_and_fused_head", "target_and_deep_head"])
@pytest.mark.parametrize("tree", [policies.Chain(4), policies.KAry([3, 2]), policies.Dynamic(10, 5, 3)])
def test_greedy_parity_with_a_fused_head(heads, tree, request):
    target, head = request.getfixturevalue(heads)
    prompts = ([3, 17, 5, 9], [42], [8, 1, 60, 33, 2, 19])
    expected = [target.generate(torch.tensor([p]), max_new_tokens=20, do_sample=False)[0, len(p):].tolist() for p in prompts]
    assert [treespec.generate(target, head, p, tree=tree, max_new_tokens=20).tokens for p in prompts] == expected
    assert [g.tokens for g in treespec.generate_batch(target, head, prompts, tree=tree, max_new_tokens=20)] == expected


@pytest.mark.parametrize("arch", ["qwen2", "gpt2"])
def test_greedy_parity_with_a_fused_head_on_other_targets(arch):
    """target_features finds each architecture's final norm (Qwen2 `norm`, GPT-2 `ln_f`) and hidden states."""
    target = tiny_model(arch, seed=3, layers=2)
    torch.manual_seed(7)
    head = EagleDraftModel(EagleDraftConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                            num_key_value_heads=2, vocab_size=64, output_token_ids=list(range(1, 64, 3)),
                                            feature_layers=[0, 1, 2])).eval()
    for prompt in ([3, 17, 5, 9], [42]):
        expected = target.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)[0, len(prompt):].tolist()
        for tree in (policies.KAry([2, 2]), policies.Dynamic(8, 4, 3)):
            assert treespec.generate(target, head, prompt, tree=tree, max_new_tokens=16).tokens == expected
            assert treespec.generate_batch(target, head, [prompt], tree=tree, max_new_tokens=16)[0].tokens == expected


@pytest.mark.parametrize("heads", ["target_and_fused_head", "target_and_deep_head"])
def test_fused_head_drafts_alike_in_the_batched_engine(heads, request):
    target, head = request.getfixturevalue(heads)
    prompts = ([3, 17, 5, 9], [42, 7], [8, 1, 60, 33, 2, 19])
    tree = policies.KAry([2, 2])
    single = [treespec.generate(target, head, p, tree=tree, max_new_tokens=16) for p in prompts]
    batched = treespec.generate_batch(target, head, prompts, tree=tree, max_new_tokens=16)
    for one, row in zip(single, batched):  # same trees accepted step by step: the batched head drafts the same
        assert [s.accepted for s in row.steps] == [s.accepted for s in one.steps]


@pytest.mark.parametrize("engine", ["single", "batch"])
def test_greedy_parity_with_a_bf16_output_layer(target_and_fused_head, engine):
    """hardware.BF16_HEAD: the head's lm_head alone in bf16 drafts other logits, not other outputs."""
    target, head = target_and_fused_head
    mixed = set_output_dtype(copy.deepcopy(head), torch.bfloat16)
    assert mixed.lm_head.weight.dtype == torch.bfloat16 and mixed.fc.weight.dtype == torch.float32
    prompts = ([3, 17, 5, 9], [42], [8, 1, 60, 33, 2, 19])
    expected = [target.generate(torch.tensor([p]), max_new_tokens=20, do_sample=False)[0, len(p):].tolist() for p in prompts]
    tree = policies.Dynamic(10, 5, 3)
    if engine == "single":
        got = [treespec.generate(target, mixed, p, tree=tree, max_new_tokens=20).tokens for p in prompts]
    else:
        got = [g.tokens for g in treespec.generate_batch(target, mixed, prompts, tree=tree, max_new_tokens=20)]
    assert got == expected
    with torch.no_grad():
        theirs, ours = (_root_and_children(h, target, prompts[0], _fused_features(target, prompts[0][:-1]))
                        for h in (head, mixed))
    for a, b in zip(ours, theirs):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=0.05, rtol=0.02)


def test_fused_head_starting_as_the_single_layer_head_drafts_alike(target_and_head):
    """init selects the last layer's feature: a fused head loaded from a single-layer head drafts as it does."""
    target, single = target_and_head
    fused = init_eagle_from_target(target, single.config.output_token_ids, feature_layers=[0, 1, 2])
    train.load_eagle_start(fused, single)
    prompt = [5, 9, 13, 2, 7]
    torch.testing.assert_close(_root_and_children(fused, target, prompt, _fused_features(target, prompt[:-1], [0, 1, 2])),
                               _root_and_children(single, target, prompt, _features(target, prompt[:-1])),
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="do not fit"):
        train.load_eagle_start(single, fused)


def test_a_grown_vocabulary_keeps_the_start_heads_logits_on_its_own_tokens(target_and_head):
    """vocab.grow: the start head's rows go to its tokens, the added tokens get the target's rows, every other
    weight is the start's, so the start's tokens keep their logits; a vocabulary that drops a token is refused."""
    target, start = target_and_head
    start_ids = list(start.config.output_token_ids)  # the even ids below 64
    grown = init_eagle_from_target(target, sorted(start_ids + [1, 3, 5, 63]))
    train.load_eagle_start(grown, start)
    position = {t: i for i, t in enumerate(grown.config.output_token_ids)}
    torch.testing.assert_close(grown.lm_head.weight[[position[t] for t in start_ids]], start.lm_head.weight)
    torch.testing.assert_close(grown.lm_head.weight[[position[t] for t in (1, 3, 5, 63)]],
                               target.lm_head.weight[[1, 3, 5, 63]])
    prompt = [5, 9, 13, 2, 7]
    features = _features(target, prompt[:-1])
    for ours, theirs in zip(_root_and_children(grown.eval(), target, prompt, features),
                            _root_and_children(start, target, prompt, features)):
        torch.testing.assert_close(ours[..., start_ids], theirs[..., start_ids], atol=1e-5, rtol=1e-5)
        assert torch.isfinite(ours[..., [1, 3, 5, 63]]).all() and torch.isinf(theirs[..., [1, 3, 5, 63]]).all()
    with pytest.raises(ValueError, match="not in the new head's vocabulary"):
        train.load_eagle_start(init_eagle_from_target(target, start_ids[1:] + [1]), start)


def test_fused_layers_outside_the_target_are_refused(target_and_fused_head):
    _, head = target_and_fused_head
    with pytest.raises(ConfigError, match=r"fuses target layers \[3\]"):
        EagleDrafter(head, tiny_model("llama", layers=2), 32)
    with pytest.raises(ConfigError, match="fuses target layers"):
        init_eagle_from_target(tiny_model("llama", layers=2), [1, 2], feature_layers=[1, 5])


@pytest.mark.parametrize("heads", ["target_and_head", "target_and_fused_head", "target_and_deep_head"])
def test_unrolled_levels_are_what_nodes_below_the_root_compute(heads, request):
    """Level d of the training-time test at input index j + d - 2 is the node d - 1 levels below the root x_j
    on the path x_{j+1} .. x_{j+d-1}, as the drafter computes it (4 levels: depths 0..3)."""
    target, head = request.getfixturevalue(heads)
    fused = head.fused
    tokens = [5, 9, 13, 2, 7, 30, 11, 4, 19, 6]
    features = _fused_features(target, tokens) if fused else _features(target, tokens)  # F_i at token i
    embeds = target.get_input_embeddings()(torch.tensor([tokens[1:]]))
    with torch.no_grad():
        levels = train.eagle_hidden(head, head.fuse_features(features[None, :-1]), embeds,
                                    torch.tensor([len(tokens) - 1]), unroll=4)
        for j in (1, 3, 5):
            drafter = OneRow(EagleDrafter(head, target, 64))
            drafter.reset(tokens[: j + 1], features[:j])
            drafted = [drafter.root_logits(tokens[j])]
            for depth in (1, 2, 3):
                drafted.append(drafter.node_logits([depth], [tokens[j + depth]], [depth - 1])[0])
            for d, logits in enumerate(drafted, start=1):
                torch.testing.assert_close(logits[head.output_ids], head.reduced_logits(levels[d - 1][0, j + d - 2]),
                                           rtol=1e-4, atol=1e-4)


def _fused_training_data():
    """A tiny target's answers with fused features: (target, features, examples, their batch, vocab)."""
    target = tiny_model("llama", seed=0, vocab=32, layers=3)
    prompts = [[(7 * i + j) % 32 for j in range(4)] for i in range(10)]
    records = distill_data.answer_batch(target, prompts, temperature=1.0, max_new_tokens=10, keep_top=8,
                                        eos_token_id=None, pad_token_id=0)
    shard = {k: [r[k] for r in records] for k in records[0]}
    shard["mode"] = ["greedy", "t1"] * (len(records) // 2)  # (the greedy ones make the P_1 estimate)
    features = distill_data.target_features(target, shard["input_ids"], feature_layers=FUSED)
    assert features[0].shape[-1] == 3 * target.config.hidden_size
    forced = distill_data.teacher_pass(target, shard["input_ids"], shard["prompt_len"], keep_top=8, features=True,
                                       feature_layers=FUSED)
    for a, b in zip(forced.features, features):
        torch.testing.assert_close(a, b)
    vocab = list(range(32))
    examples = train.make_examples(shard, vocab, max_len=64)
    batch = train.collate_eagle(examples, [features[e.index] for e in examples], pad_id=0)
    assert batch.features.shape[-1] == 3 * target.config.hidden_size
    return target, features, examples, batch, vocab


@pytest.mark.parametrize("unroll", [3, 4])
def test_fused_training_pieces_learn_on_tokens(unroll):
    target, features, examples, batch, vocab = _fused_training_data()
    head = init_eagle_from_target(target, vocab, feature_layers=FUSED)
    embed = target.get_input_embeddings()
    losses, logits, parts = _train_steps(head, embed, batch, unroll)
    assert losses[-1] < 0.8 * losses[0] and set(parts) == {"ce"} and logits.shape == (len(batch.rows), len(vocab))
    assert head.fuse.weight.grad is not None and head.fuse.weight.grad.abs().sum() > 0
    with torch.no_grad():  # held-out agreement per level: level 1 is what the loss scores
        levels = train.eagle_level_logits(head, embed, batch, unroll)
        torch.testing.assert_close(levels[0], train.eagle_loss(head, embed, batch, unroll=unroll)[1])

    def score(chunk, every_level=True):
        part = train.collate_eagle(chunk, [features[e.index] for e in chunk], pad_id=0)
        logits = train.eagle_level_logits(head, embed, part, unroll)
        return (logits if every_level else logits[0]), part.top_ids

    metrics, first = train.agreement(score, examples), train.agreement(lambda c: score(c, False), examples)
    assert set(metrics) == set(first) | {f"{key}_level{d}" for key in ("agree_top1", "target_in_top4", "greedy_agree_top1")
                                         for d in range(2, unroll + 1)}
    assert {k: metrics[k] for k in first} == first and 0 <= metrics[f"agree_top1_level{unroll}"] <= 1


def test_fused_training_forward_in_bf16_autocast_is_the_fp32_one_rounded():
    """train.dtype=bfloat16 runs the training forward under CPU autocast: the loss and the gradients of the fp32
    weights are the fp32 ones to bf16 rounding (no -inf mask turned into NaN, nothing left in bf16)."""
    target, _, _, batch, vocab = _fused_training_data()
    torch.manual_seed(3)
    head = init_eagle_from_target(target, vocab, feature_layers=FUSED)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn_like(p))
    embed = target.get_input_embeddings()
    losses, grads = [], []
    for autocast in (False, True):
        head.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, logits, _ = train.eagle_loss(head, embed, batch, unroll=3)
        loss.backward()
        assert loss.dtype == torch.float32 and torch.isfinite(logits.float()).all()
        assert logits.dtype == (torch.bfloat16 if autocast else torch.float32)  # autocast did run the head in bf16
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in head.parameters() if p.grad is not None]))
        assert all(p.dtype == torch.float32 for p in head.parameters())
    assert abs(losses[1] - losses[0]) < 0.02 * losses[0]
    assert torch.isfinite(grads[1]).all() and torch.nn.functional.cosine_similarity(grads[0], grads[1], dim=0) > 0.99


def test_unrolled_mask_of_level_2_is_the_former_one():
    lengths, width = torch.tensor([5, 3]), 5
    positions = torch.arange(width)
    earlier = (positions[None, :] < positions[:, None])[None] & (positions[None, None, :] < lengths[:, None, None])
    own = torch.eye(width, dtype=torch.bool)[None].expand(2, -1, -1)
    assert torch.equal(train.unrolled_mask(lengths, width, torch.float32), additive(torch.cat([earlier, own], -1), torch.float32))
    assert train.unrolled_mask(lengths, width, torch.float32, level=3).shape == (2, 1, width, 3 * width)


def test_a_head_saved_before_fused_heads_existed_loads_as_a_single_layer_head(target_and_head, tmp_path):
    """config.json without `feature_layers` (heads saved before fused heads existed): a single-layer head that
    drafts exactly as the same weights saved with the field do."""
    target, head = target_and_head
    head.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["feature_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    old = load_model(tmp_path).eval()
    assert old.config.feature_layers == [] and not hasattr(old, "fuse") and not old.fused
    prompt = [5, 9, 13, 2, 7]
    features = _features(target, prompt[:-1])
    torch.testing.assert_close(_root_and_children(old, target, prompt, features),  # kernels may round loaded
                               _root_and_children(head, target, prompt, features), atol=1e-5, rtol=1e-5)  # weights apart


# ----------------------------------------------------------------------------------------------------
# Deeper heads: more decoder layers (draft.eagle_layers)
# ----------------------------------------------------------------------------------------------------


def test_a_deeper_head_started_from_a_trained_one(target_and_fused_head, tmp_path):
    """A two-layer head loaded from a one-layer one holds its weights in its first layer; with its second layer's
    output projections at zero (that layer then adds nothing to the residual stream) it drafts exactly as the
    start does, so the layers are stacked in order and the second reads the first's output. It saves and loads
    as a two-layer head; a deeper head cannot start a shallower one."""
    target, start = target_and_fused_head
    deep = init_eagle_from_target(target, start.config.output_token_ids, feature_layers=FUSED, layers=2)
    train.load_eagle_start(deep, start)
    for name, weight in start.layer.state_dict().items():
        assert torch.equal(deep.layer.state_dict()[name], weight)
    prompt = [5, 9, 13, 2, 7]
    features = _fused_features(target, prompt[:-1])
    with torch.no_grad():
        deep.more_layers[0].self_attn.o_proj.weight.zero_()
        deep.more_layers[0].mlp.down_proj.weight.zero_()
    torch.testing.assert_close(_root_and_children(deep.eval(), target, prompt, features),
                               _root_and_children(start, target, prompt, features), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        deep.more_layers[0].mlp.down_proj.weight.normal_(0, 0.05)
    changed = _root_and_children(deep, target, prompt, features)
    assert not torch.allclose(changed[0], _root_and_children(start, target, prompt, features)[0])
    deep.save_pretrained(tmp_path)
    loaded = load_model(tmp_path).eval()
    assert loaded.config.num_hidden_layers == 2 and len(loaded.more_layers) == 1
    torch.testing.assert_close(_root_and_children(loaded, target, prompt, features), changed, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="do not fit"):
        train.load_eagle_start(start, deep)
    with pytest.raises(ValueError, match="at least one decoder layer"):
        init_eagle_from_target(target, [1, 2], layers=0)
