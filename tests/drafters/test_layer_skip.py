"""Layer-skip self-speculation: the skipped pass, its drafter against the target, parity, the search and its cache."""

import copy

import pytest
import torch
from conftest import report, run_inprocess, tiny_model

import treespec
from treespec import policies
from treespec.app.configs import LAYER_SKIP, load_pair
from treespec.decode.cache import new_cache
from treespec.decode.mask import causal_mask
from treespec.errors import ConfigError
from treespec.models.layer_skip import LayerSkip, skipping
from treespec.models.lean import lean_decoder
from treespec.plan.hardware import batch_cache_key
from treespec.plan.layer_skip import cached_layer_skip, predicted_speedup, search_layer_skip, skip_ladder
from treespec.plan.optimizer import sequoia_tree

PROMPTS = [[5, 9, 2, 33, 17, 8, 41, 3], [7, 1, 60], [12, 30, 30, 4, 55, 21]]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def target(request):
    return tiny_model(request.param, seed=3, layers=4, vocab=96, sharpness=8.0)


def _without_layers(model, skip):
    """A copy of `model` whose decoder has the layers `skip` removed: what a skipped pass must compute."""
    pruned = copy.deepcopy(model)
    pruned.model.layers = torch.nn.ModuleList(
        [layer for i, layer in enumerate(pruned.model.layers) if i not in skip])
    for i, layer in enumerate(pruned.model.layers):
        layer.self_attn.layer_idx = i
    pruned.config.num_hidden_layers = len(pruned.model.layers)
    if getattr(pruned.config, "layer_types", None):
        pruned.config.layer_types = [t for i, t in enumerate(pruned.config.layer_types) if i not in skip]
    return pruned.eval()


@torch.no_grad()
def test_a_skipped_pass_is_the_model_without_those_layers(target):
    ids = torch.tensor([PROMPTS[0]])
    draft = skipping(target, [1, 2])
    mask = causal_mask(torch.tensor([ids.shape[1]]), ids.shape[1], torch.float32)
    hidden, _ = lean_decoder(target)(ids, torch.arange(ids.shape[1])[None], mask,
                                     new_cache(target, 16, layers=len(draft.layers)), layers=draft.layers)
    expected = _without_layers(target, {1, 2})(ids).logits
    torch.testing.assert_close(target.get_output_embeddings()(hidden), expected, rtol=1e-4, atol=1e-4)


def test_a_draft_skipping_nothing_is_the_target_and_every_node_is_accepted(target):
    """Same logits as the target at every drafted node, through the slot bookkeeping: with p == q every draft is
    accepted, at any temperature, over many steps."""
    draft = LayerSkip((), 4)
    for temperature in (0.0, 0.8):
        out = treespec.generate(target, draft, PROMPTS[0], tree=policies.Chain(k=3), max_new_tokens=21,
                                temperature=temperature, seed=4)
        assert [s.accepted for s in out.steps[:-1]] == [4] * (len(out.steps) - 1)


@pytest.mark.parametrize("tree", [policies.Chain(k=3), policies.Dynamic(budget=7, depth=4, topk=3),
                                  sequoia_tree([0.6, 0.2, 0.1], budget=6, max_depth=4)],
                         ids=["chain", "dynamic", "sequoia"])
def test_greedy_parity_one_row_and_a_batch(target, tree):
    draft = skipping(target, [2])
    expected = [treespec.autoregressive(target, p, max_new_tokens=14).tokens for p in PROMPTS]
    assert treespec.generate(target, draft, PROMPTS[0], tree=tree, max_new_tokens=14).tokens == expected[0]
    batch = treespec.generate_batch(target, draft, PROMPTS, tree=tree, max_new_tokens=14)
    assert [g.tokens for g in batch] == expected


def test_sampled_batch_rows_equal_their_one_row_runs(target):
    draft = skipping(target, [0, 3])
    tree = policies.Dynamic(budget=6, depth=3, topk=2)
    batch = treespec.generate_batch(target, draft, PROMPTS, tree=tree, max_new_tokens=10, temperature=0.9, seed=7)
    for b, prompt in enumerate(PROMPTS):
        alone = treespec.generate(target, draft, prompt, tree=tree, max_new_tokens=10, temperature=0.9, seed=7 + b)
        assert batch[b].tokens == alone.tokens


def test_layer_skip_is_checked():
    with pytest.raises(ConfigError, match="lie in"):
        LayerSkip((4,), 4)
    with pytest.raises(ConfigError, match="at least one layer"):
        LayerSkip((0, 1), 2)
    assert LayerSkip((3, 1, 1), 4).skip == (1, 3) and LayerSkip((3, 1), 4).layers == (0, 2)
    target = tiny_model("llama", layers=3)
    with pytest.raises(ConfigError, match="3"):
        treespec.generate(target, LayerSkip((1,), 4), [1, 2, 3], tree=policies.Chain(k=2), max_new_tokens=2)
    with pytest.raises(ConfigError, match="lean decoder"):
        skipping(tiny_model("gpt2", layers=3), [1])


def test_predicted_speedup_and_ladder():
    assert predicted_speedup(0.0, 0.5) == pytest.approx((1 / 1.5, 1))  # no chain pays: below 1
    speedup, depth = predicted_speedup(0.9, 0.1)
    assert depth > 1 and speedup == pytest.approx(sum(0.9 ** i for i in range(depth + 1)) / (1 + 0.1 * depth))
    assert skip_ladder(30) == [3, 6, 9, 12, 15, 18, 21, 24] and skip_ladder(2) == [1]


def test_the_search_measures_each_candidate_and_picks_the_best_prediction(target):
    sequences = [p + treespec.autoregressive(target, p, max_new_tokens=12).tokens for p in PROMPTS]
    starts = [len(p) for p in PROMPTS]
    found = search_layer_skip(target, sequences, starts, counts=[1, 2, 3])
    candidates = found.search["candidates"]
    assert [c["skip_count"] for c in candidates] == [1, 2, 3] and len(found.search["influence"]) == 4
    assert all(0 <= c["agreement"] <= 1 and c["cost"] > 0 for c in candidates)
    best = max(candidates, key=lambda c: c["predicted_speedup"])
    assert list(found.skip) == best["skip"] and found.search["calibration_tokens"] == 36
    assert found.search["candidates"][0]["skip"][0] == min(range(4), key=lambda i: found.search["influence"][i])
    with pytest.raises(ConfigError, match="answer"):
        search_layer_skip(target, sequences, [0, 0, 0])


def test_the_search_is_cached_per_target_and_calibration(target, monkeypatch, tmp_path):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    calls = []

    def calibrate():
        calls.append(1)
        return [PROMPTS[0] + [1, 2, 3, 4]], [len(PROMPTS[0])]

    first, costs, origin = cached_layer_skip(target, calibrate, calibration={"test": 1})
    again, costs_again, origin_again = cached_layer_skip(target, calibrate, calibration={"test": 1})
    assert origin.startswith("measured now") and origin_again.startswith("cached from") and len(calls) == 1
    assert again == first and costs_again == costs and set(costs) >= {1, 2, 4, 8, 16}
    cached_layer_skip(target, calibrate, calibration={"test": 2})
    assert len(calls) == 2


def test_load_pair_layerskip_plans_with_the_drafts_measured_costs(monkeypatch, tmp_path):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    pair = load_pair("tiny-random-llama", LAYER_SKIP)
    assert isinstance(pair.draft, LayerSkip) and "layer skip measured now" in pair.hardware.origin
    assert pair.costs.draft_cost(1) > 0 and pair.hardware.draft_dtype == pair.hardware.target_dtype
    prompt = pair.encode("Name three rivers.")
    out = treespec.generate(pair.target, pair.draft, prompt, tree=policies.Dynamic(budget=5, depth=3, topk=2),
                            max_new_tokens=8)
    assert out.tokens == treespec.autoregressive(pair.target, prompt, max_new_tokens=8).tokens
    key = batch_cache_key(pair.target, pair.draft, batch_sizes=[2], sizes=[1, 2], prefix_len=8)
    assert key["draft"] == pair.draft.describe() and key["draft_dtype"] is None


def test_the_demo_drafts_with_layer_skipping(monkeypatch, tmp_path):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    result = run_inprocess("treespec.generate", ["model=tiny", "draft=layerskip", "compare=true", "max_new_tokens=12",
                                                 "prompt=Hello there"], module=True)
    assert result.returncode == 0, result.stderr
    rows = report(result.stdout)
    assert rows["outputs identical"] == "yes" and rows["draft"].startswith("layerskip(skip 1/2")
    assert "layer skip measured now" in rows["hardware profile"]
