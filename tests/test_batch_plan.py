"""Plans per batch size: B-specific step costs, the fall-back to no tree where trees stop paying, the batch
profile's draft widths and overheads measured on tiny models, its cache beside hardware=auto's, the config glue."""

import pytest
from conftest import tiny_model

from treespec.batch import generate_batch
from treespec.batch_latency import BatchLatencyProfile, measure_batch_latency
from treespec.batch_plan import auto_batch_profile, batch_step_costs, format_plan_rows, plan_batches, plan_for_batch, plan_rows
from treespec.configs import HardwareSpec, LoadedPair, TreeSpec, build_batch_policy, resolve_batch_hardware
from treespec.errors import ConfigError
from treespec.tree import chain

ACCEPT = [0.6, 0.15, 0.05, 0.03]
SIZES = (1, 2, 4, 8, 16, 32)


def _profile() -> BatchLatencyProfile:
    """B = 1: a flat t(n) (trees nearly free); B = 16: the pass grows with every node (compute bound), as on a GPU."""
    target = {1: {n: 10.0 * (1 + 0.01 * (n - 1)) for n in SIZES},
              4: {n: 12.0 * (1 + 0.1 * (n - 1)) for n in SIZES},
              16: {n: 20.0 * n for n in SIZES}}
    widths = {b: {w: 0.5 * b ** 0.5 * (1 + 0.1 * w) for w in (1, 2, 4, 8, 16)} for b in target}
    return BatchLatencyProfile(target, {b: row[1] for b, row in widths.items()}, {"device": "test"}, widths,
                               {1: 0.5, 4: 1.0, 16: 3.0}, {1: 0.2, 4: 0.4, 16: 1.0})


def test_step_costs_are_relative_to_the_batch_one_token_pass():
    profile = _profile()
    costs = batch_step_costs(profile, 4)
    assert costs.target_cost(1) == 1.0 and costs.target_cost(8) == pytest.approx(1.7)
    assert costs.draft_cost(2) == pytest.approx(0.5 * 2 * 1.2 / 12.0)
    assert costs.overhead == pytest.approx(1.0 / 12) and costs.baseline_overhead == pytest.approx(0.4 / 12)
    # the baseline is a one-node tree at the same B: its step is 1 + o_B,1 and its speedup exactly 1
    assert costs.step(chain(0)) == pytest.approx(1 + 0.4 / 12) and costs.speedup(chain(0), ACCEPT) == 1.0


def test_the_tree_shrinks_with_the_batch_and_falls_back_to_none():
    plans = plan_batches(ACCEPT, _profile())
    assert sorted(plans) == [1, 4, 16]
    assert plans[1].speculates and plans[1].plan.predicted_speedup > 1.5
    assert plans[4].speculates and plans[4].plan.budget < plans[1].plan.budget
    assert not plans[16].speculates and plans[16].plan.budget == 1 and plans[16].plan.predicted_speedup == 1.0
    for b, plan in plans.items():  # predicted throughput of all rows, against the batched AR loop at that B
        pass_ms, o1 = _profile().target_ms[b][1], _profile().baseline_overhead_ms[b]
        assert plan.baseline_tokens_per_second == pytest.approx(1000 * b / (pass_ms + o1))
        assert plan.predicted_tokens_per_second == pytest.approx(plan.baseline_tokens_per_second
                                                                 * plan.plan.predicted_speedup)
    assert plans[16].predicted_tokens_per_second > plans[1].predicted_tokens_per_second  # batching still pays
    rows = plan_rows(plans)
    assert [r["batch_size"] for r in rows] == [1, 4, 16] and rows[2]["speculates"] is False and rows[2]["widths"] == [1]
    text = format_plan_rows(rows)
    assert "none (autoregressive)" in text and f"n={plans[1].plan.budget}" in text
    assert plans[1].describe()["batch_size"] == 1 and plans[1].describe()["predicted_tokens_per_second"] > 0


def test_given_values_are_kept_and_the_search_stays_within_measured_sizes():
    profile = _profile()
    plan = plan_for_batch(ACCEPT, profile, 4, budget=6)
    assert plan.plan.budget == 6 and plan.plan.describe()["chosen"] == ["max_depth"]
    both = plan_for_batch(ACCEPT, profile, 16, budget=8, max_depth=3)  # given both: kept even where it does not pay
    assert both.plan.budget == 8 and both.plan.depth <= 3 and both.plan.predicted_speedup < 1
    assert plan_for_batch(ACCEPT, profile, 1).plan.budget <= max(SIZES)
    with pytest.raises(ConfigError, match="batch size 2 was not measured"):
        plan_for_batch(ACCEPT, profile, 2)


def test_measured_draft_widths_and_overheads(tmp_path):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_batch_latency(target, draft, batch_sizes=(1, 2), sizes=(2, 3), draft_widths=(2, 4), prefix_len=10,
                                    repeats=1, warmup=0, overheads=True)
    assert all(sorted(row) == [1, 2, 4] and min(row.values()) > 0 for row in profile.draft_width_ms.values())
    assert profile.draft_ms == {b: row[1] for b, row in profile.draft_width_ms.items()}
    assert set(profile.overhead_ms) == set(profile.baseline_overhead_ms) == {1, 2}
    assert min(profile.overhead_ms.values()) >= 0 and min(profile.baseline_overhead_ms.values()) >= 0
    at2 = profile.at_batch(2)
    assert at2.draft_width_ms == profile.draft_width_ms[2] and at2.overhead_ms == profile.overhead_ms[2]
    assert sorted(at2.draft_costs) == [1, 2, 4] and at2.baseline_overhead_ms == profile.baseline_overhead_ms[2]
    path = tmp_path / "b.yaml"
    profile.to_yaml(path)
    back = BatchLatencyProfile.from_yaml(path)
    assert back.draft_width_ms[2] == pytest.approx(profile.draft_width_ms[2], abs=1e-3)
    assert back.overhead_ms == pytest.approx(profile.overhead_ms, abs=1e-3)
    assert profile.relative_latency()[2][3] == pytest.approx(profile.target_ms[2][3] / profile.target_ms[1][1])
    with pytest.raises(ConfigError, match="needs batch size 1"):
        BatchLatencyProfile({2: {1: 1.0}}, {}).relative_latency()
    # a profile written before widths and overheads were measured still reads (they default to c(1) and 0)
    old = BatchLatencyProfile.from_dict({"target_ms": {2: {1: 5.0, 2: 6.0}}, "draft_ms": {2: 1.0}}).at_batch(2)
    assert old.draft_costs == {1: 0.2} and old.overhead_ms == 0.0


def test_auto_batch_profile_is_cached_by_models_and_batch_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_PROFILES", str(tmp_path))
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    options = dict(sizes=(1, 2), prefix_len=8, repeats=1, warmup=0)
    first, origin = auto_batch_profile(target, draft, (1, 2), **options)
    assert origin.startswith("measured now") and first.batch_sizes == [1, 2] and set(first.overhead_ms) == {1, 2}
    files = list(tmp_path.glob("batch-*.yaml"))
    assert len(files) == 1
    again, origin = auto_batch_profile(target, draft, (2, 1), **options)
    assert origin.startswith("cached") and again.target_ms[2] == pytest.approx(first.target_ms[2], abs=1e-3)
    _, origin = auto_batch_profile(target, draft, (2,), **options)  # other batch sizes: another entry
    assert origin.startswith("measured now") and len(list(tmp_path.glob("batch-*.yaml"))) == 2
    files[0].write_text("not: [a profile")  # a damaged entry is measured again
    _, origin = auto_batch_profile(target, draft, (1, 2), **options)
    assert origin.startswith("measured now")
    other = tiny_model("llama", seed=2, layers=1)  # another draft: another key
    _, origin = auto_batch_profile(target, other, (1, 2), **options)
    assert origin.startswith("measured now")
    target.set_attn_implementation("eager")  # another attention implementation: another key
    _, origin = auto_batch_profile(target, draft, (1, 2), **options)
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
    at1, at16 = (build_batch_policy(planned, ACCEPT, loaded, b, "auto") for b in (1, 16))
    assert at1.info["batch_size"] == 1 and at1.info["budget"] > 1 and at1.info["hardware_aware"]
    assert at16.info["budget"] == 1 and at16.info["predicted_speedup"] == 1.0  # no tree at B = 16
    assert at1.info["budget"] <= max(SIZES)
    fixed = build_batch_policy(TreeSpec(policy="sequoia", budget=8, max_depth=4), ACCEPT, None, 4)
    assert fixed.info["budget"] == 8 and fixed.info["batch_size"] == 4 and "predicted_speedup" not in fixed.info
    with pytest.raises(ConfigError, match="batch_size=4 needs a batch profile"):
        build_batch_policy(planned, ACCEPT, None, 4)


def test_a_planned_one_node_tree_decodes_as_batched_autoregressive():
    target = tiny_model("llama", seed=0)
    tree = plan_for_batch(ACCEPT, _profile(), 16).tree
    prompts = [[1, 2, 3], [4, 5]]
    planned = generate_batch(target, None, prompts, tree=tree, max_new_tokens=5)
    plain = generate_batch(target, None, prompts, tree=None, max_new_tokens=5)
    assert [g.tokens for g in planned] == [g.tokens for g in plain] and all(g.target_passes == 5 for g in planned)
