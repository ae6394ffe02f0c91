"""Latency profiles by batch size: measurement on tiny models (the engine's own passes and drafter calls), the
planner's view at each B, the YAML round trip, and the formats written before batch sizes were in every profile."""

import pytest
import torch
from conftest import tiny_model

from treespec.errors import ConfigError
from treespec.models.eagle_head import init_eagle_from_target
from treespec.plan.costs import LatencyProfile, StepCosts, measure_latency


def test_measure_latency_on_tiny_models(tmp_path):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_latency(target, draft, sizes=(2, 4, 8), prefix_len=16, repeats=3, warmup=1)
    assert profile.batch_sizes == [1] and sorted(profile.target_ms[1]) == [1, 2, 4, 8]
    assert profile.relative_latency()[1] == 1.0 and all(v > 0 for v in profile.target_ms[1].values())
    assert sorted(profile.draft_ms[1]) == [1, 2, 4, 8, 16] and profile.draft_cost() > 0
    assert profile.settings["prefix_len"] == 16 and profile.settings["device"] == "cpu"
    path = tmp_path / "profile.yaml"
    profile.to_yaml(path)
    back = LatencyProfile.from_yaml(path)
    assert back.target_ms[1] == pytest.approx(profile.target_ms[1], abs=1e-3)
    assert back.draft_cost() == pytest.approx(profile.draft_cost(), rel=1e-3)


def test_batch_sizes_are_measured_together_and_seen_one_at_a_time(tmp_path):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_latency(target, draft, batch_sizes=(1, 3), sizes=(2, 4), draft_widths=(1, 2), prefix_len=12,
                              repeats=2, warmup=1, overheads=True)
    assert profile.batch_sizes == [1, 3] and all(sorted(row) == [1, 2, 4] for row in profile.target_ms.values())
    assert sorted(profile.draft_ms) == [1, 3] and min(min(row.values()) for row in profile.draft_ms.values()) > 0
    assert set(profile.overhead_ms) == set(profile.baseline_overhead_ms) == {1, 3}
    costs = profile.step_costs(3)
    assert isinstance(costs, StepCosts) and costs.batch_size == 3 and costs.target_cost(1) == 1.0
    assert costs.pass_ms == profile.target_ms[3][1] and costs.draft_cost(1) == pytest.approx(profile.draft_cost(3))
    assert costs.overhead == pytest.approx(profile.overhead_ms[3] / profile.target_ms[3][1])
    assert costs.autoregressive_tokens_per_second == pytest.approx(
        3000 / (profile.target_ms[3][1] + profile.baseline_overhead_ms[3]))
    back = LatencyProfile.from_yaml(profile.to_yaml(tmp_path / "profile.yaml") and tmp_path / "profile.yaml")
    assert back.target_ms[3] == pytest.approx(profile.target_ms[3], abs=1e-3) and back.draft_ms.keys() == {1, 3}
    with pytest.raises(ConfigError, match="batch size 2 was not measured"):
        profile.step_costs(2)
    merged = measure_latency(target, None, batch_sizes=(2,), sizes=(2,), prefix_len=8, repeats=1, warmup=0)
    assert profile.merged(merged).batch_sizes == [1, 2, 3]


def test_target_only_profile():
    profile = measure_latency(tiny_model("gpt2"), None, sizes=(3,), prefix_len=8, repeats=2, warmup=0)
    assert profile.draft_ms == {} and profile.draft_cost() == 0 and sorted(profile.target_ms[1]) == [1, 3]
    assert profile.step_costs().draft_cost(1) == 0


def test_an_eagle_head_is_timed_through_its_drafter_at_every_batch_size():
    target = tiny_model("llama", seed=0)
    torch.manual_seed(0)
    head = init_eagle_from_target(target, list(range(0, 64, 2)))
    profile = measure_latency(target, head, batch_sizes=(1, 2), sizes=(2,), prefix_len=12, repeats=2, warmup=1)
    assert profile.draft_cost(1) > 0 and profile.draft_cost(2) > 0 and sorted(profile.target_ms[2]) == [1, 2]


def test_profiles_written_before_batch_sizes_are_read():
    """One sequence's (target_ms {n: ms}, draft_ms: ms, draft_width_ms, overheads in ms), as conf/hardware/ and
    older caches hold them, and the former batch profiles (target_ms {B: {n: ms}}, draft_ms {B: ms})."""
    single = LatencyProfile.from_dict({"target_ms": {1: 40.0, 2: 50.0}, "draft_ms": 4.0,
                                       "draft_width_ms": {1: 4.0, 2: 6.0}, "overhead_ms": 2.0,
                                       "baseline_overhead_ms": 1.0})
    assert single.batch_sizes == [1] and single.draft_costs() == {1: 0.1, 2: 0.15}
    assert single.step_costs().overhead == 0.05 and single.step_costs().baseline_overhead == 0.025
    only_c = LatencyProfile.from_dict({"target_ms": {1: 40.0}, "draft_ms": 2.0})
    assert only_c.draft_costs() == {1: 0.05}
    batch = LatencyProfile.from_dict({"target_ms": {1: {1: 40.0}, 4: {1: 80.0, 2: 90.0}}, "draft_ms": {1: 4.0, 4: 8.0},
                                      "draft_width_ms": {4: {1: 8.0, 2: 9.0}}, "overhead_ms": {4: 4.0}})
    assert batch.draft_costs(4) == {1: 0.1, 2: 0.1125} and batch.draft_costs(1) == {1: 0.1}
    assert batch.step_costs(4).overhead == 0.05 and batch.step_costs(1).overhead == 0


def test_invalid_profiles():
    with pytest.raises(ConfigError, match="latency profile"):
        LatencyProfile.from_dict({"target_ms": {2: 1.0}, "draft_ms": 1.0})
    with pytest.raises(ConfigError, match="latency profile"):
        LatencyProfile.from_dict({"draft_ms": 1.0})
    with pytest.raises(ConfigError, match="latency profile"):
        LatencyProfile.from_dict({"target_ms": {2: {2: 1.0}}})
    with pytest.raises(ConfigError, match=">= 1"):
        measure_latency(tiny_model("llama"), None, batch_sizes=(0,))


def test_overheads_are_measured_against_a_pass_of_the_same_round(monkeypatch):
    """measure_overheads on a scripted clock: the machine runs 1.5x to 2.2x slower than when the profile was taken,
    and drifts between rounds; each round's steps are read against that round's bare pass, so the overheads come back
    in the profile's milliseconds (3 and 1), where a step less the profile's passes would read 12.5 ms and more."""
    from treespec.plan import costs

    profile = LatencyProfile({1: {1: 10.0, 2: 11.0, 3: 12.0}}, {1: {1: 2.0}})  # a chain of 2: 12 + 2 x 2 = 16 ms
    speeds = iter([1.5, 1.9, 1.6, 2.2, 1.7, 1.8, 2.0] * 4)
    state = {"now": 0.0, "speed": next(speeds)}

    class FakeDecoder:
        def __init__(self, target, drafter, prompts, *, policy, **options):
            self.work = 16.0 + 3.0 if policy.shape.size > 1 else 10.0 + 1.0  # passes plus the engine's own, in ms

        def step(self):
            state["now"] += state["speed"] * self.work / 1000

    def bare_pass(*args):
        seconds = state["speed"] * 10.0 / 1000
        state["speed"] = next(speeds)  # the machine drifts between rounds
        return seconds

    monkeypatch.setattr(costs, "Decoder", FakeDecoder)
    monkeypatch.setattr(costs, "Clock", lambda device: lambda: state["now"])
    monkeypatch.setattr(costs, "_timed_pass", bare_pass)
    monkeypatch.setattr(costs, "_prefilled_cache", lambda *args: None)
    monkeypatch.setattr(costs, "make_drafter", lambda *args: None)
    target = tiny_model("llama", seed=0)
    overhead, baseline = costs.measure_overheads(target, target, profile, 1, prefix_len=8, steps=7)
    assert overhead == pytest.approx(3.0) and baseline == pytest.approx(1.0)
    assert costs.measure_overheads(target, None, profile, 1, prefix_len=8, steps=7) == (0.0, pytest.approx(1.0))
