"""Medusa heads: what the drafter proposes at each depth, greedy parity for every policy at B = 1 and B = 3, sampling
(rows as alone, the emitted distribution), saving and loading, mismatched targets; the trained heads on the default
target (real_models)."""

import numpy as np
import pytest
import torch
from conftest import PROMPTS, OneRow, tiny_model
from scipy import stats

import treespec
from treespec import models, policies
from treespec.decode.engine import StepOutcome
from treespec.drafters import MedusaDrafter, make_drafter
from treespec.errors import ConfigError
from treespec.eval.data import encode_chat
from treespec.models import load_model
from treespec.models.medusa_head import MedusaConfig, MedusaHeads, new_heads, with_proposal_vocab
from treespec.training import distill_data
from treespec.training.medusa import Positions, flatten, head_loss

K = 3


def _features(target, tokens):
    with torch.no_grad():
        return target.model(torch.tensor([tokens])).last_hidden_state[0]  # [L, H], after the final norm


def fit_heads(target, heads, steps=150, lr=1e-2):
    """Heads distilled from the target's own greedy continuations of a few prompts (so that drafts get accepted)."""
    sequences, prompt_lens = [], []
    for seed in range(6):
        prompt = torch.randint(0, target.config.vocab_size, (5,), generator=torch.Generator().manual_seed(seed)).tolist()
        sequences.append(torch.tensor(prompt + treespec.autoregressive(target, prompt, max_new_tokens=40).tokens))
        prompt_lens.append(len(prompt))
    out = distill_data.teacher_pass(target, sequences, prompt_lens, keep_top=5, features=True)
    starts = [max(0, p - 1 - heads.num_heads) for p in prompt_lens]
    data = flatten([{"features": [f[s:] for f, s in zip(out.features, starts)], "top_ids": out.top_ids,
                     "top_logprobs": out.top_logprobs, "prompt_len": prompt_lens, "start": starts}], heads.num_heads)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=lr)
    lm_head = target.get_output_embeddings().requires_grad_(False)
    index = torch.arange(data.size)
    for _ in range(steps):
        optimizer.zero_grad()
        sum(head_loss(heads, lm_head, data, index, k) for k in range(1, heads.num_heads + 1)).backward()
        optimizer.step()
    return heads.eval(), data


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama", seed=0, layers=2)
    torch.manual_seed(3)
    heads, _ = fit_heads(target, new_heads(target, K))
    return target, heads


def test_heads_start_as_the_identity_and_shapes_are_as_documented():
    target = tiny_model("llama", seed=0, layers=1)
    heads = new_heads(target, 4)
    h = torch.randn(2, 5, 32)
    logits = heads(h, target.get_output_embeddings())
    assert logits.shape == (2, 5, 4, 64)
    assert torch.allclose(logits[:, :, 2], target.get_output_embeddings()(h), atol=1e-5)
    assert heads(h, target.get_output_embeddings(), [3]).shape == (2, 5, 1, 64)
    assert sum(p.numel() for p in heads.parameters()) == 4 * (32 * 32 + 32)


def test_drafter_proposes_head_d_plus_1_at_depth_d(pair):
    target, heads = pair
    lm_head = target.get_output_embeddings()
    prompt = [5, 9, 13, 2, 7]
    features = _features(target, prompt[:-1])
    assert torch.allclose(lm_head(features), target(torch.tensor([prompt[:-1]])).logits[0], atol=1e-4)  # normed
    drafter = OneRow(MedusaDrafter(heads, target))
    with torch.no_grad():
        expected = heads(features[-1], lm_head)  # [K, V]: h is the feature of the token before the root
        drafter.reset(prompt, features)
        assert torch.allclose(drafter.root_logits(prompt[-1]), expected[0], atol=1e-5)
        level1 = drafter.node_logits([1, 2], [20, 21], [0, 0])
        assert torch.allclose(level1, expected[1].expand(2, -1), atol=1e-5)  # whatever the parent or token
        level2 = drafter.node_logits([3], [22], [2])
        assert torch.allclose(level2[0], expected[2], atol=1e-5)
        with pytest.raises(ConfigError, match="at most 3 levels"):
            drafter.node_logits([4], [23], [3])  # a node at depth 3 would need head 4
        # accepted root -> 20; the feature at 20 (the token before the bonus) is the next h
        path = _features(target, prompt + [20])[len(prompt) - 1:]
        drafter.observe(StepOutcome((0, 1), (prompt[-1], 20), 30, path))
        assert torch.allclose(drafter.root_logits(30), heads(path[-1], lm_head)[0], atol=1e-5)


def test_one_token_prompt_starts_from_zero_features(pair):
    target, heads = pair
    drafter = MedusaDrafter(heads, target)
    drafter.reset([[4]], None)
    with torch.no_grad():
        assert torch.allclose(drafter.root_logits([4])[0], heads(torch.zeros(32), target.get_output_embeddings())[0],
                              atol=1e-5)


POLICIES = {
    "dynamic": policies.Dynamic(budget=10, depth=4, topk=3),
    "dynamic_deeper_than_the_heads": policies.Dynamic(budget=12, depth=7, topk=3),
    "chain": policies.Chain(3),
    "kary": policies.KAry([3, 2, 1]),
    "sequoia": policies.Sequoia([0.55, 0.2, 0.1, 0.05], budget=12, max_depth=6),
    "paths": policies.Paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)]),
    "adaptive": policies.Adaptive(max_depth=6, threshold=0.05, width=2),
    "hybrid": policies.Hybrid(policies.Dynamic(budget=8, depth=4, topk=3)),
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_greedy_parity_at_one_row_and_three(pair, name):
    target, heads = pair
    tree = POLICIES[name]
    expected = [treespec.autoregressive(target, p, max_new_tokens=24).tokens for p in PROMPTS]
    alone = [treespec.generate(target, heads, p, tree=tree, max_new_tokens=24) for p in PROMPTS]
    assert [g.tokens for g in alone] == expected
    if name != "hybrid":  # (prompt-lookup branches of a hybrid tree may go deeper)
        assert max(s.tree_depth for g in alone for s in g.steps) <= K + 1  # trees stop at the heads' depth
    batched = treespec.generate_batch(target, heads, PROMPTS, tree=tree, max_new_tokens=24)
    assert [g.tokens for g in batched] == expected
    if name.startswith("dynamic"):
        assert sum(len(g.tokens) for g in alone) / sum(g.target_passes for g in alone) > 1.2  # drafts are accepted


def test_sampled_rows_draw_as_alone(pair):
    target, heads = pair
    tree = policies.Dynamic(budget=8, depth=4, topk=3)
    batched = treespec.generate_batch(target, heads, PROMPTS, tree=tree, max_new_tokens=20, temperature=0.7, seed=5)
    for b, prompt in enumerate(PROMPTS):
        alone = treespec.generate(target, heads, prompt, tree=tree, max_new_tokens=20, temperature=0.7, seed=5 + b)
        assert batched[b].tokens == alone.tokens and len(alone.tokens) == 20


V = 8


def test_sampling_with_the_heads_is_distributed_as_the_target():
    """Chi-square of the first two tokens against the target's exact distribution at t = 0.8."""
    target = tiny_model("llama", seed=10, vocab=V, hidden=16, layers=1, sharpness=4.0)
    torch.manual_seed(11)
    heads = new_heads(target, 2)
    with torch.no_grad():
        for p in heads.parameters():
            p.add_(0.3 * torch.randn_like(p))
    prompt, runs, temperature = [1, 5, 2], 1500, 0.8
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt])).logits[0, -1].double() / temperature, -1)
        second = torch.softmax(target(torch.tensor([prompt + [x] for x in range(V)])).logits[:, -1].double()
                               / temperature, -1)
    expected = (first[:, None] * second).numpy().ravel() * runs
    counts, accepted = np.zeros((V, V)), 0
    tree = policies.Dynamic(budget=5, depth=3, topk=2)
    for run in range(runs):
        out = treespec.generate(target, heads, prompt, tree=tree, max_new_tokens=2, temperature=temperature, seed=run)
        counts[out.tokens[0], out.tokens[1]] += 1
        accepted += out.steps[0].accepted - 1
    assert accepted > 0.1 * runs, "the test needs drafts that are often accepted"
    big = expected >= 5
    observed = np.append(counts.ravel()[big], counts.ravel()[~big].sum())
    pooled = np.append(expected[big], expected[~big].sum())
    assert stats.chisquare(observed[pooled > 0], pooled[pooled > 0]).pvalue > 1e-3


def test_heads_save_load_and_dispatch(pair, tmp_path):
    target, heads = pair
    heads.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert isinstance(loaded, MedusaHeads) and loaded.config.num_heads == K
    assert all(torch.equal(a, b) for a, b in zip(heads.state_dict().values(), loaded.state_dict().values()))
    assert isinstance(make_drafter(loaded, target, 64), MedusaDrafter) and loaded.vocab.numel() == 0


def test_a_proposal_vocabulary_is_stored_with_the_heads_and_restricts_every_level(pair, tmp_path):
    target, heads = pair
    prompt = PROMPTS[2]
    full = treespec.generate(target, heads, prompt, tree=policies.Dynamic(6, 4, 3), max_new_tokens=16)
    ids = torch.tensor(sorted(set(full.tokens + prompt)))  # the tokens this run needs (and no others)
    restricted = with_proposal_vocab(new_heads(target, K), ids)
    restricted.load_state_dict({k: v for k, v in heads.state_dict().items() if k != "vocab"}, strict=False)
    restricted.save_pretrained(tmp_path)
    loaded = load_model(tmp_path)
    assert loaded.config.proposal_vocab == len(ids) and torch.equal(loaded.vocab, ids)
    drafter = OneRow(MedusaDrafter(loaded, target))
    with torch.inference_mode():
        drafter.reset(prompt, _features(target, prompt))
        logits = drafter.root_logits(prompt[-1])
    outside = torch.ones(target.config.vocab_size, dtype=torch.bool)
    outside[ids] = False
    assert torch.isinf(logits[outside]).all() and torch.isfinite(logits[ids]).all()
    out = treespec.generate(target, loaded, prompt, tree=policies.Dynamic(6, 4, 3), max_new_tokens=16)
    assert out.tokens == full.tokens
    explicit = MedusaDrafter(heads, target, torch.tensor([1, 2, 3]))  # an explicit subset overrides the heads' own
    assert explicit.lm_head.vocab.tolist() == [1, 2, 3]
    with pytest.raises(ConfigError, match="distinct token ids"):
        with_proposal_vocab(new_heads(target, K), torch.tensor([1, 1]))


def test_heads_for_another_target_are_refused(pair):
    _, heads = pair
    wider = tiny_model("llama", seed=0, layers=1, hidden=64)
    with pytest.raises(ConfigError, match="trained for another target"):
        treespec.generate(wider, heads, [1, 2, 3], tree=policies.Chain(2), max_new_tokens=4)
    other_vocab = MedusaHeads(MedusaConfig(num_heads=2, hidden_size=32, vocab_size=100, target="elsewhere"))
    with pytest.raises(ConfigError, match=r"trained for elsewhere"):
        models.check_pair(tiny_model("llama", seed=0, layers=1), other_vocab)


@pytest.mark.real_models
def test_trained_heads_on_the_default_target():
    target = models.load_model(models.DEFAULT_TARGET)
    heads = models.load_model("smollm2-135m-medusa")
    assert isinstance(heads, MedusaHeads) and heads.config.num_heads == 4
    directory = models.resolve("smollm2-135m-medusa")
    assert sum(p.stat().st_size for p in directory.iterdir()) / 1e6 < 6
    tokenizer = models.load_tokenizer(models.DEFAULT_TARGET)
    prompt = encode_chat(tokenizer, [{"role": "user", "content": "Explain why the sky is blue."}])
    base = treespec.autoregressive(target, prompt, max_new_tokens=48)
    out = treespec.generate(target, heads, prompt, tree=policies.Dynamic(budget=6, depth=4, topk=3),
                            max_new_tokens=48)
    assert out.tokens == base.tokens
    assert out.mean_accepted > 1.3


def test_positions_label_head_k_with_the_target_row_k_ahead():
    """flatten: the feature at position t is labelled for head k by the answer row of position t + k."""
    prompt_len, answer, heads = 4, 3, 2  # rows 0..2 sit at positions 3..5; features stored from position 1
    features = torch.arange(6, dtype=torch.float16)[1:, None]  # positions 1..5
    shard = {"features": [features], "top_ids": [torch.arange(answer)[:, None]],
             "top_logprobs": [torch.zeros(answer, 1)], "prompt_len": [prompt_len], "start": [1]}
    data: Positions = flatten([shard], heads)
    assert data.rows[0].tolist() == [-1, 0, 1, 2, -1]  # t = 1..5: t + 1 = 3, 4, 5 are rows 0, 1, 2
    assert data.rows[1].tolist() == [0, 1, 2, -1, -1]
