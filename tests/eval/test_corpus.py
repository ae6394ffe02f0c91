"""The self-distillation corpus: shards of token ids, the manifest, append and resume, untrusted shards."""

import json
from pathlib import Path

import numpy as np
import pytest

from treespec.errors import ConfigError
from treespec.eval import corpus

HEADER = {"target": "t", "target_files": {"model.safetensors": "ab" * 32}, "vocab_size": 300, "id_dtype": "uint16",
          "pool": {"builder": "b", "size": 20, "seed": 0}, "modes": [{"name": "greedy", "temperature": 0.0, "weight": 1.0},
                                                                   {"name": "t1", "temperature": 1.0, "weight": 1.0}]}


def _records(start, stop, vocab=300):
    rng = np.random.default_rng(start)
    return [corpus.Record(pool_index=i, mode=i % 2, category=i % 10, prompt=rng.integers(0, vocab, 3 + i % 4).tolist(),
                          answer=rng.integers(0, vocab, 1 + i % 5).tolist()) for i in range(start, stop)]


def _add(directory, manifest, start, stop):
    entry = corpus.write_shard(directory, start, stop, _records(start, stop), manifest["id_dtype"])
    entry.update(sampling={}, max_new_tokens=8, precision="float32", command="c", config={}, machine=corpus.machine(),
                 date=corpus.now(), seconds=0.1)
    return corpus.append_shard(directory, manifest, entry)


def test_id_dtype_is_the_narrowest_that_fits():
    assert corpus.id_dtype(49152) == "uint16" and corpus.id_dtype(65536) == "uint16"
    assert corpus.id_dtype(65537) == "uint32" and corpus.id_dtype(151936) == "uint32"


@pytest.mark.parametrize("dtype, vocab", [("uint16", 65536), ("uint32", 151936)])
def test_shard_round_trip(tmp_path, dtype, vocab):
    records = _records(4, 9, vocab) + [corpus.Record(9, 1, 3, [vocab - 1, 0], [vocab - 1])]
    entry = corpus.write_shard(tmp_path, 4, 10, records, dtype)
    arrays = corpus.read_shard(tmp_path / entry["file"])
    assert arrays["ids"].dtype == np.dtype(dtype) and entry["file"] == "p000004-000010.npz"
    assert [(ids.tolist(), plen) for ids, plen in corpus.records(arrays)] == [
        (list(r.prompt) + list(r.answer), len(r.prompt)) for r in records]
    assert arrays["pool_index"].tolist() == list(range(4, 10)) and arrays["mode"].tolist() == [r.mode for r in records]
    assert entry["answers"] == 6 and entry["answer_tokens"] == sum(len(r.answer) for r in records)
    assert entry["sha256"] == corpus.file_sha256(tmp_path / entry["file"])
    assert (tmp_path / entry["file"]).stat().st_mode & 0o777 == 0o644


def test_ids_that_do_not_fit_the_dtype_are_refused(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        corpus.write_shard(tmp_path, 0, 1, [corpus.Record(0, 0, 0, [1], [70000])], "uint16")
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind


def test_manifest_validation_names_the_problem():
    manifest = corpus.new_manifest(HEADER)
    assert corpus.validate_manifest(manifest) == []
    entry = {k: 0 for k in corpus.ENTRY_KEYS} | {"file": "p000000-000004.npz", "prompts": {"start": 0, "stop": 4}}
    assert corpus.validate_manifest({**manifest, "shards": [entry]}) == []
    assert "overlaps" in corpus.validate_manifest({**manifest, "shards": [entry, entry]})[0]
    assert "does not match" in corpus.validate_manifest({**manifest, "shards": [entry | {"file": "p000000-000005.npz"}]})[0]
    assert "lacks" in corpus.validate_manifest({**manifest, "shards": [{"file": "x"}]})[0]
    assert "format" in corpus.validate_manifest({**manifest, "format": 0})[0]
    assert "id_dtype" in corpus.validate_manifest({**manifest, "id_dtype": "int8"})[0]
    with pytest.raises(ValueError):
        corpus.new_manifest({"target": "t"})


def test_a_broken_manifest_file_is_an_error_not_a_fresh_start(tmp_path):
    (tmp_path / corpus.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        corpus.open_corpus(tmp_path, HEADER)
    (tmp_path / corpus.MANIFEST).write_text(json.dumps({"format": 1}))
    with pytest.raises(ConfigError, match="missing header field"):
        corpus.open_corpus(tmp_path, HEADER)


def test_append_and_resume(tmp_path):
    manifest, problems = corpus.open_corpus(tmp_path, HEADER)
    assert problems == [] and manifest["shards"] == [] and (tmp_path / corpus.MANIFEST).exists()
    assert corpus.plan_shards(manifest, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    manifest = _add(tmp_path, manifest, 0, 4)
    manifest = _add(tmp_path, manifest, 4, 8)
    reopened, problems = corpus.open_corpus(tmp_path, HEADER)  # a later session
    assert problems == [] and reopened == manifest
    assert corpus.plan_shards(reopened, 10, 4) == [(8, 10)]
    assert corpus.plan_shards(reopened, 20, 4) == [(8, 12), (12, 16), (16, 20)]  # a session that asks for more
    reopened = _add(tmp_path, reopened, 8, 12)
    assert [e["file"] for e in corpus.read_manifest(tmp_path)["shards"]] == [
        "p000000-000004.npz", "p000004-000008.npz", "p000008-000012.npz"]
    totals = corpus.summary(reopened)
    assert totals["shards"] == 3 and totals["answers"] == 12
    data = corpus.load(tmp_path, reopened, ["greedy", "t1"], [f"c{i}" for i in range(10)])
    assert data["pool_index"] == list(range(12)) and data["mode"][:2] == ["greedy", "t1"]
    assert data["input_ids"][5].tolist() == list(_records(4, 8)[1].prompt) + list(_records(4, 8)[1].answer)


def test_another_target_or_pool_cannot_append(tmp_path):
    corpus.open_corpus(tmp_path, HEADER)
    with pytest.raises(ConfigError, match="pool"):
        corpus.open_corpus(tmp_path, {**HEADER, "pool": {**HEADER["pool"], "size": 40}})
    with pytest.raises(ConfigError, match="target_files"):
        corpus.open_corpus(tmp_path, {**HEADER, "target_files": {"model.safetensors": "cd" * 32}})
    corpus.open_corpus(tmp_path, {**HEADER, "target": "/some/path/to/t"})  # the same weights under another name


def test_interrupted_and_damaged_shards_are_dropped_and_replanned(tmp_path):
    manifest, _ = corpus.open_corpus(tmp_path, HEADER)
    for start in (0, 4, 8):
        manifest = _add(tmp_path, manifest, start, start + 4)
    # a run stopped after writing a shard but before recording it, and one stopped while writing
    corpus.write_shard(tmp_path, 12, 16, _records(12, 16), "uint16")
    (tmp_path / ".p000016-000020.npz.x1y2.tmp").write_bytes(b"PK\x03\x04 half")
    # a recorded shard whose file was changed (truncated), and one whose file is gone
    damaged = tmp_path / "p000004-000008.npz"
    damaged.write_bytes(damaged.read_bytes()[:-10])
    (tmp_path / "p000008-000012.npz").unlink()

    repaired, problems = corpus.open_corpus(tmp_path, HEADER)
    assert len(problems) == 4
    assert any("p000012-000016.npz is not in the manifest" in p for p in problems)
    assert any("partly written" in p for p in problems)
    assert any("p000004-000008.npz does not match its recorded sha256" in p for p in problems)
    assert any("p000008-000012.npz is missing" in p for p in problems)
    assert [e["file"] for e in repaired["shards"]] == ["p000000-000004.npz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [corpus.MANIFEST, "p000000-000004.npz"]
    assert corpus.read_manifest(tmp_path) == repaired  # the manifest on disk was rewritten too
    assert corpus.plan_shards(repaired, 20, 4) == [(4, 8), (8, 12), (12, 16), (16, 20)]
    assert corpus.open_corpus(tmp_path, HEADER) == (repaired, [])


def test_a_shard_that_hashes_but_holds_other_records_is_not_trusted(tmp_path):
    manifest, _ = corpus.open_corpus(tmp_path, HEADER)
    manifest = _add(tmp_path, manifest, 0, 4)
    entry = manifest["shards"][0]
    assert corpus.verify_entry(tmp_path, entry) is None
    assert "holds other records" in corpus.verify_entry(tmp_path, {**entry, "answers": 5})
    assert "holds other records" in corpus.verify_entry(tmp_path, {**entry, "prompts": {"start": 1, "stop": 4}})


def test_plan_fills_gaps_first_and_never_crosses_an_answered_prompt():
    manifest = corpus.new_manifest(HEADER)
    manifest["shards"] = [{"prompts": {"start": 3, "stop": 5}}, {"prompts": {"start": 9, "stop": 12}}]
    assert corpus.plan_shards(manifest, 14, 4) == [(0, 3), (5, 9), (12, 14)]
    assert corpus.plan_shards(manifest, 4, 4) == [(0, 3)]
    with pytest.raises(ConfigError):
        corpus.plan_shards(manifest, 4, 0)


def test_the_committed_corpora_verify_and_stay_small():
    root = Path(__file__).parents[2] / "corpus"
    manifests = sorted(root.glob("*/manifest.json")) + sorted(root.glob("*/*/manifest.json"))  # corpora, their parts
    assert manifests, "the repository keeps its self-distillation corpus under corpus/<target>/"
    parts = {path.parent for path in manifests}
    total = 0
    for path in manifests:
        manifest = corpus.read_manifest(path.parent)  # ConfigError when malformed
        for entry in manifest["shards"]:
            assert corpus.verify_entry(path.parent, entry) is None
        listed = {e["file"] for e in manifest["shards"]} | {corpus.MANIFEST}
        listed |= {p.name for p in path.parent.iterdir() if p in parts}  # the self-prompt and second-turn parts
        assert {p.name for p in path.parent.iterdir()} == listed, "files in the corpus that its manifest does not list"
        total += sum(p.stat().st_size for p in path.parent.iterdir() if p.is_file())
    assert total < 25e6


def test_split_holdout_depends_only_on_each_key():
    keys = list(range(2000))
    train, held = corpus.split_holdout(keys, 0.03, seed=0)
    assert sorted(train + held) == keys and 30 < len(held) < 90
    assert held == [i for i in keys if corpus.holdout_score(i, 0) < 0.03]
    grown_train, grown_held = corpus.split_holdout(keys + list(range(5000, 6000)), 0.03, seed=0)
    assert grown_held[:len(held)] == held  # held-out keys stay held out as the corpus grows
    assert corpus.split_holdout([7], 0.0, seed=0) == ([], [0])  # at least one is held out
    assert corpus.split_holdout(keys, 0.03, seed=1)[1] != held
