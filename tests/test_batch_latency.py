"""Batch latency profiles: t(B, n) and the batched draft step measured on tiny models, per-B views, YAML."""

import pytest
import torch
from conftest import tiny_model

from treespec.batch_latency import BatchLatencyProfile, measure_batch_latency
from treespec.eagle import EagleDraftConfig, EagleDraftModel
from treespec.errors import ConfigError
from treespec.latency import LatencyProfile


def test_measure_batch_latency_on_tiny_models(tmp_path):
    target, draft = tiny_model("llama", seed=0), tiny_model("llama", seed=1, layers=1)
    profile = measure_batch_latency(target, draft, batch_sizes=(1, 3), sizes=(2, 4), prefix_len=12, repeats=2, warmup=1)
    assert profile.batch_sizes == [1, 3] and all(sorted(row) == [1, 2, 4] for row in profile.target_ms.values())
    assert all(v > 0 for row in profile.target_ms.values() for v in row.values())
    assert sorted(profile.draft_ms) == [1, 3] and min(profile.draft_ms.values()) > 0
    at3 = profile.at_batch(3)
    assert isinstance(at3, LatencyProfile) and at3.relative_latency[1] == 1.0 and at3.draft_cost > 0
    assert at3.settings["batch_size"] == 3 and at3.settings["prefix_len"] == 12
    assert profile.per_row_ms()[3][2] == pytest.approx(profile.target_ms[3][2] / 3)
    path = tmp_path / "batch.yaml"
    profile.to_yaml(path)
    back = BatchLatencyProfile.from_yaml(path)
    assert back.target_ms[3] == pytest.approx(profile.target_ms[3], abs=1e-3) and back.draft_ms.keys() == {1, 3}
    with pytest.raises(ConfigError, match="batch size 2 was not measured"):
        profile.at_batch(2)


def test_target_only_and_eagle_head_profiles():
    target = tiny_model("llama", seed=0)
    assert measure_batch_latency(target, None, batch_sizes=(2,), sizes=(3,), prefix_len=8, repeats=1,
                                 warmup=0).draft_ms == {}
    hidden = target.config.hidden_size
    head = EagleDraftModel(EagleDraftConfig(output_token_ids=list(range(0, 64, 2)), vocab_size=64, hidden_size=hidden,
                                            intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=4,
                                            num_key_value_heads=2)).eval()
    profile = measure_batch_latency(target, head, batch_sizes=(1, 2), sizes=(2,), prefix_len=8, repeats=1, warmup=0)
    assert set(profile.draft_ms) == {1, 2} and torch.tensor(list(profile.draft_ms.values())).gt(0).all()


def test_invalid_batch_profiles():
    with pytest.raises(ConfigError, match="batch latency profile"):
        BatchLatencyProfile.from_dict({"target_ms": {2: {2: 1.0}}})
    with pytest.raises(ConfigError, match=">= 1"):
        measure_batch_latency(tiny_model("llama"), None, batch_sizes=(0,))
