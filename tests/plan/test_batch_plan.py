"""Plans per batch size: B-specific step costs, the fall-back to no tree where trees stop paying, the profile at
batch sizes measured on demand and cached beside hardware=auto's, the config glue."""

import pytest
from conftest import tiny_model

from treespec.api import generate_batch
from treespec.app.configs import HardwareSpec, LoadedPair, TreeSpec, build_policy, resolve_batch_hardware
from treespec.decode.tree import chain
from treespec.errors import ConfigError
from treespec.plan.costs import LatencyProfile
from treespec.plan.hardware import batch_profile
from treespec.plan.planner import format_plans, plan_tree

ACCEPT = [0.6, 0.15, 0.05, 0.03]
SIZES = (1, 2, 4, 8, 16, 32)


def _profile() -> LatencyProfile:
    """B = 1: a flat t(n) (trees nearly free); B = 16: the pass grows with every node (compute bound), as on a GPU."""
    target = {1: {n: 10.0 * (1 + 0.01 * (n - 1)) for n in SIZES},
              4: {n: 12.0 * (1 + 0.1 * (n - 1)) for n in SIZES},
              16: {n: 20.0 * n for n in SIZES}}
    widths = {b: {w: 0.5 * b ** 0.5 * (1 + 0.1 * w) for w in (1, 2, 4, 8, 16)} for b in target}
    return LatencyProfile(target, widths, {1: 0.5, 4: 1.0, 16: 3.0}, {1: 0.2, 4: 0.4, 16: 1.0}, {"device": "test"})


def plans_by_batch(profile: LatencyProfile) -> dict:
    return {b: plan_tree(ACCEPT, profile.step_costs(b)) for b in profile.batch_sizes}


def test_step_costs_are_relative_to_the_batch_one_token_pass():
    profile = _profile()
    costs = profile.step_costs(4)
    assert costs.target_cost(1) == 1.0 and costs.target_cost(8) == pytest.approx(1.7)
    assert costs.draft_cost(2) == pytest.approx(0.5 * 2 * 1.2 / 12.0)
    assert costs.overhead == pytest.approx(1.0 / 12) and costs.baseline_overhead == pytest.approx(0.4 / 12)
    # the baseline is a one-node tree at the same B: its step is 1 + o_B,1 and its speedup exactly 1
    assert costs.step(chain(0)) == pytest.approx(1 + 0.4 / 12) and costs.speedup(chain(0), ACCEPT) == 1.0


def test_the_tree_shrinks_with_the_batch_and_falls_back_to_none():
    plans = plans_by_batch(_profile())
    assert sorted(plans) == [1, 4, 16]
    assert plans[1].speculates and plans[1].predicted_speedup > 1.5
    assert plans[4].speculates and plans[4].budget < plans[1].budget
    assert not plans[16].speculates and plans[16].budget == 1 and plans[16].predicted_speedup == 1.0
    for b, plan in plans.items():  # predicted throughput of all rows, against the batched AR loop at that B
        pass_ms, o1 = _profile().target_ms[b][1], _profile().baseline_overhead_ms[b]
        assert plan.baseline_tokens_per_second == pytest.approx(1000 * b / (pass_ms + o1))
        assert plan.predicted_tokens_per_second == pytest.approx(plan.baseline_tokens_per_second
                                                                 * plan.predicted_speedup)
    assert plans[16].predicted_tokens_per_second > plans[1].predicted_tokens_per_second  # batching still pays
    rows = [plan.describe() for plan in plans.values()]
    assert [r["batch_size"] for r in rows] == [1, 4, 16] and rows[2]["speculates"] is False and rows[2]["widths"] == []
    text = format_plans(list(plans.values()))
    assert "none (autoregressive)" in text and f"n={plans[1].budget}" in text
    assert rows[0]["predicted_tokens_per_second"] > 0


def test_given_values_are_kept_and_the_search_stays_within_measured_sizes():
    profile = _profile()
    plan = plan_tree(ACCEPT, profile.step_costs(4), budget=6)
    assert plan.budget == 6 and plan.describe()["chosen"] == ["max_depth"]
    both = plan_tree(ACCEPT, profile.step_costs(16), budget=8, max_depth=3)  # given both: kept where it does not pay
    assert both.budget == 8 and both.depth <= 3 and both.predicted_speedup < 1
    assert plan_tree(ACCEPT, profile.step_costs(1)).budget <= max(SIZES)
    with pytest.raises(ConfigError, match="batch size 2 was not measured"):
        profile.step_costs(2)


def test_a_batch_profile_is_cached_by_models_and_batch_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    options = dict(sizes=(1, 2), prefix_len=8, repeats=1, warmup=0)
    first, origin = batch_profile(target, draft, (1, 2), **options)
    assert origin.startswith("measured now") and first.batch_sizes == [1, 2] and set(first.overhead_ms) == {1, 2}
    files = list(tmp_path.glob("batch-*.yaml"))
    assert len(files) == 1
    again, origin = batch_profile(target, draft, (2, 1), **options)
    assert origin.startswith("cached") and again.target_ms[2] == pytest.approx(first.target_ms[2], abs=1e-3)
    _, origin = batch_profile(target, draft, (2,), **options)  # other batch sizes: another entry
    assert origin.startswith("measured now") and len(list(tmp_path.glob("batch-*.yaml"))) == 2
    files[0].write_text("not: [a profile")  # a damaged entry is measured again
    _, origin = batch_profile(target, draft, (1, 2), **options)
    assert origin.startswith("measured now")
    other = tiny_model("llama", seed=2, layers=1)  # another draft: another key
    _, origin = batch_profile(target, other, (1, 2), **options)
    assert origin.startswith("measured now")
    target.set_attn_implementation("eager")  # another attention implementation: another key
    _, origin = batch_profile(target, draft, (1, 2), **options)
    assert origin.startswith("measured now")


def test_config_glue_plans_per_batch_and_refuses_without_a_profile(tmp_path):
    profile = _profile()
    path = tmp_path / "batch.yaml"
    profile.to_yaml(path)
    pair = LoadedPair(None, None, None)
    spec = HardwareSpec(name="cpu_smollm2", batch_profile=str(path))
    loaded, origin = resolve_batch_hardware(spec, pair, (1, 16))
    assert origin == f"batch profile {path}" and loaded.batch_sizes == [1, 4, 16]
    with pytest.raises(ConfigError, match="no batch sizes \\[8\\]"):
        resolve_batch_hardware(spec, pair, (8,))
    assert resolve_batch_hardware(HardwareSpec(name="cpu_smollm2"), pair, (4,))[0] is None
    planned = TreeSpec(policy="sequoia", acceptance=ACCEPT)
    at1, at16 = (build_policy(planned, ACCEPT, loaded, "auto", b) for b in (1, 16))
    assert at1.info["batch_size"] == 1 and at1.info["budget"] > 1 and at1.info["hardware_aware"]
    assert at16.info["budget"] == 1 and at16.info["predicted_speedup"] == 1.0  # no tree at B = 16
    assert at1.info["budget"] <= max(SIZES)
    fixed = build_policy(TreeSpec(policy="sequoia", budget=8, max_depth=4), ACCEPT, None, batch_size=4)
    assert fixed.info["budget"] == 8 and fixed.info["batch_size"] == 4 and "predicted_speedup" not in fixed.info
    with pytest.raises(ConfigError, match="profile at batch size 4"):
        build_policy(planned, ACCEPT, None, batch_size=4)


def test_a_planned_one_node_tree_decodes_as_batched_autoregressive():
    target = tiny_model("llama", seed=0)
    tree = plan_tree(ACCEPT, _profile().step_costs(16)).tree
    prompts = [[1, 2, 3], [4, 5]]
    planned = generate_batch(target, None, prompts, tree=tree, max_new_tokens=5)
    plain = generate_batch(target, None, prompts, tree=None, max_new_tokens=5)
    assert [g.tokens for g in planned] == [g.tokens for g in plain] and all(g.target_passes == 5 for g in planned)
