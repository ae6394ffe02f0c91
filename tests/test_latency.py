"""Latency profiles: measurement on tiny models and the YAML round trip."""

import pytest
from conftest import tiny_model

from treespec.errors import ConfigError
from treespec.latency import LatencyProfile, measure_latency


def test_measure_latency_on_tiny_models(tmp_path):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_latency(target, draft, sizes=(2, 4, 8), prefix_len=16, repeats=3, warmup=1)
    assert sorted(profile.target_ms) == [1, 2, 4, 8]
    assert profile.relative_latency[1] == 1.0 and all(v > 0 for v in profile.target_ms.values())
    assert profile.draft_ms > 0 and profile.draft_cost > 0
    assert profile.settings["prefix_len"] == 16 and profile.settings["device"] == "cpu"
    path = tmp_path / "profile.yaml"
    profile.to_yaml(path)
    back = LatencyProfile.from_yaml(path)
    assert back.target_ms == pytest.approx(profile.target_ms, abs=1e-3)
    assert back.draft_cost == pytest.approx(profile.draft_cost, rel=1e-3)


def test_target_only_profile():
    profile = measure_latency(tiny_model("gpt2"), None, sizes=(3,), prefix_len=8, repeats=2, warmup=0)
    assert profile.draft_ms == 0 and sorted(profile.target_ms) == [1, 3]


def test_invalid_profiles():
    with pytest.raises(ConfigError, match="latency profile"):
        LatencyProfile.from_dict({"target_ms": {2: 1.0}, "draft_ms": 1.0})
    with pytest.raises(ConfigError, match="latency profile"):
        LatencyProfile.from_dict({"draft_ms": 1.0})


def test_an_eagle_head_is_timed_through_its_drafter():
    import torch

    from treespec.training import train

    target = tiny_model("llama", seed=0)
    torch.manual_seed(0)
    head = train.init_eagle_from_target(target, list(range(0, 64, 2)))
    profile = measure_latency(target, head, sizes=(2,), prefix_len=12, repeats=2, warmup=1)
    assert profile.draft_ms > 0 and sorted(profile.target_ms) == [1, 2]
