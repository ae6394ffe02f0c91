"""The self-distillation corpus: the target's answers to pool prompts, kept compactly in the repository.

A corpus is a directory (e.g. `corpus/smollm2-135m-instruct/`) of shards plus `manifest.json`. A shard,
`p{start:06d}-{stop:06d}.npz` (numpy, zlib-compressed), answers the pool prompts with indices [start, stop):

    ids          [T] uint16 (uint32 when the vocabulary does not fit)  every record's prompt then answer ids
    lengths      [N] uint32   prompt + answer length of each record (records are concatenated in `ids`)
    prompt_lens  [N] uint32   chat-formatted prompt length
    pool_index   [N] uint32   the prompt's index in the pool
    mode         [N] uint8    index into the manifest's `modes` (greedy, t0.7, ...)
    category     [N] uint8    index into `prompt_pool.CATEGORIES`

Only token ids are stored: soft targets (the target's top-k) are recomputed by teacher forcing when training.
The manifest has a header, fixed when the corpus is created (target and its file hashes, vocabulary, id
dtype, the prompt pool's size and seed, the sampling modes with their weights), and one entry per shard
(file, sha256, bytes, counts, sampling, precision, command and config, machine, date, seconds). A shard is
trusted only when its entry's sha256 matches the file and the file decodes to the recorded counts; a shard
file without an entry (a run stopped between writing it and recording it), a temporary file (stopped while
writing) or an entry whose file is missing or differs is dropped by `open_corpus(repair=True)`, and its
prompts count as not answered, so the next run regenerates them. Shards are appended, never rewritten.
A corpus may hold parts in subdirectories, each a corpus of the same format with its own manifest: `self/`
(SELF: requests the target wrote itself, numbered from 0 in `pool_index`) and `turn2/` (FOLLOWUPS: second turns,
shards named and indexed as the first turns they continue).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from treespec.errors import ConfigError
from treespec.models.host import cpu_flags
from treespec.models.loading import file_sha256

FORMAT = 1
MANIFEST = "manifest.json"
# Parts of a corpus beyond the pool's first turns: subdirectories, each a corpus of its own (same format)
SELF = "self"  # requests the target wrote itself (training/self_prompts.py), numbered 0, 1, ...
FOLLOWUPS = "turn2"  # second turns after the target's own first answers; shards named as their first turns'
SHARD_NAME = re.compile(r"^p(\d{6})-(\d{6})\.npz$")
HEADER_KEYS = ("target", "target_files", "vocab_size", "id_dtype", "pool", "modes")
# what must agree for a run to append to an existing corpus (the target's name may differ, e.g. a path to it)
COMPATIBLE_KEYS = ("target_files", "vocab_size", "id_dtype", "pool", "modes")
ENTRY_KEYS = ("file", "sha256", "bytes", "prompts", "answers", "prompt_tokens", "answer_tokens", "id_dtype", "sampling",
              "max_new_tokens", "precision", "command", "config", "machine", "date", "seconds")


@dataclass(frozen=True)
class Record:
    """One answered prompt."""

    pool_index: int
    mode: int  # index into the manifest's modes
    category: int  # index into prompt_pool.CATEGORIES
    prompt: Sequence[int]  # chat-formatted prompt ids
    answer: Sequence[int]  # the target's answer ids (ends with EOS unless cut by max_new_tokens)


def id_dtype(vocab_size: int) -> str:
    """The narrowest unsigned dtype that holds every token id: "uint16" up to 65536 ids, else "uint32"."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def shard_name(start: int, stop: int) -> str:
    return f"p{start:06d}-{stop:06d}.npz"


def _atomic_write(path: Path, write) -> None:
    """write(handle) into a temporary file next to `path`, then rename it into place (no partial files)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these are repository files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_shard(directory: Path, start: int, stop: int, records: Sequence[Record], dtype: str) -> dict:
    """Write the records answering pool prompts [start, stop) as one shard; returns the manifest fields
    that describe the file (file, sha256, bytes, prompts, answers, prompt_tokens, answer_tokens, id_dtype)."""
    if not records:
        raise ValueError("a shard needs at least one record")
    limit = np.iinfo(dtype).max
    sequences = [np.asarray(list(r.prompt) + list(r.answer), dtype=np.int64) for r in records]
    ids = np.concatenate(sequences)
    if ids.size and (ids.min() < 0 or ids.max() > limit):
        raise ValueError(f"token ids outside [0, {limit}] cannot be stored as {dtype}")
    arrays = {
        "ids": ids.astype(dtype),
        "lengths": np.array([len(s) for s in sequences], dtype=np.uint32),
        "prompt_lens": np.array([len(r.prompt) for r in records], dtype=np.uint32),
        "pool_index": np.array([r.pool_index for r in records], dtype=np.uint32),
        "mode": np.array([r.mode for r in records], dtype=np.uint8),
        "category": np.array([r.category for r in records], dtype=np.uint8),
    }
    path = directory / shard_name(start, stop)
    _atomic_write(path, lambda handle: np.savez_compressed(handle, **arrays))
    prompt_tokens = int(arrays["prompt_lens"].sum())
    return {"file": path.name, "sha256": file_sha256(path), "bytes": path.stat().st_size,
            "prompts": {"start": start, "stop": stop}, "answers": len(records), "prompt_tokens": prompt_tokens,
            "answer_tokens": int(ids.size) - prompt_tokens, "id_dtype": dtype}


def read_shard(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a shard file, checked for internal consistency (ValueError when they do not fit)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in ("ids", "lengths", "prompt_lens", "pool_index", "mode", "category")}
    n = len(arrays["lengths"])
    if any(len(arrays[k]) != n for k in ("prompt_lens", "pool_index", "mode", "category")):
        raise ValueError(f"{path.name}: per-record arrays differ in length")
    if int(arrays["lengths"].sum()) != len(arrays["ids"]) or (arrays["prompt_lens"] > arrays["lengths"]).any():
        raise ValueError(f"{path.name}: record lengths do not add up to the stored ids")
    return arrays


def records(arrays: dict[str, np.ndarray]) -> list[tuple[np.ndarray, int]]:
    """(ids [L] int64, prompt_len) of every record of a shard."""
    ends = np.cumsum(arrays["lengths"].astype(np.int64))
    starts = ends - arrays["lengths"]
    ids = arrays["ids"].astype(np.int64)
    return [(ids[a:b], int(p)) for a, b, p in zip(starts, ends, arrays["prompt_lens"])]


# ----------------------------------------------------------------------------------------------------
# The manifest
# ----------------------------------------------------------------------------------------------------


def new_manifest(header: dict) -> dict:
    missing = [k for k in HEADER_KEYS if k not in header]
    if missing:
        raise ValueError(f"corpus header lacks {missing}")
    return {"format": FORMAT, **{k: header[k] for k in HEADER_KEYS}, "shards": []}


def read_manifest(directory: Path) -> dict | None:
    """The manifest of `directory`, or None when there is none; ConfigError when it is not a valid one."""
    path = directory / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except ValueError as error:
        raise ConfigError(f"{path} is not valid JSON ({error}); restore it from git") from error
    problems = validate_manifest(manifest)
    if problems:
        raise ConfigError(f"{path} is not a valid corpus manifest: {problems[0]}")
    return manifest


def validate_manifest(manifest: object) -> list[str]:
    """What is wrong with a manifest's structure (an empty list when nothing is)."""
    if not isinstance(manifest, dict):
        return ["not a JSON object"]
    if manifest.get("format") != FORMAT:
        return [f"format is {manifest.get('format')!r}, expected {FORMAT}"]
    problems = [f"missing header field '{k}'" for k in HEADER_KEYS if k not in manifest]
    if manifest.get("id_dtype") not in ("uint16", "uint32"):
        problems.append(f"id_dtype is {manifest.get('id_dtype')!r}")
    if not isinstance(manifest.get("shards"), list):
        return problems + ["'shards' is not a list"]
    seen: set[int] = set()
    for i, entry in enumerate(manifest["shards"]):
        if not isinstance(entry, dict):
            problems.append(f"shard entry {i} is not an object")
            continue
        lacking = [k for k in ENTRY_KEYS if k not in entry]
        if lacking:
            problems.append(f"shard entry {i} lacks {lacking}")
            continue
        start, stop = entry["prompts"].get("start"), entry["prompts"].get("stop")
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop):
            problems.append(f"shard entry {i} has prompts {entry['prompts']}")
            continue
        if entry["file"] != shard_name(start, stop):
            problems.append(f"shard entry {i}: file {entry['file']} does not match its prompts [{start}, {stop})")
        if seen & set(range(start, stop)):
            problems.append(f"shard entry {i} overlaps another shard's prompts")
        seen |= set(range(start, stop))
    return problems


def write_manifest(directory: Path, manifest: dict) -> None:
    problems = validate_manifest(manifest)
    if problems:
        raise ValueError(f"refusing to write an invalid manifest: {problems[0]}")
    text = json.dumps(manifest, indent=1) + "\n"
    _atomic_write(directory / MANIFEST, lambda handle: handle.write(text.encode()))


def check_compatible(manifest: dict, header: dict, directory: Path) -> None:
    """ConfigError when this run's header differs from the corpus's in anything that must agree."""
    for key in COMPATIBLE_KEYS:
        if manifest[key] != header[key]:
            raise ConfigError(f"the corpus in {directory} has {key}={json.dumps(manifest[key])}, this run "
                              f"{json.dumps(header[key])}: appending would mix data; choose another corpus.dir")


def verify_entry(directory: Path, entry: dict) -> str | None:
    """Why a manifest entry cannot be trusted (None when its file exists, hashes and decodes as recorded)."""
    path = directory / entry["file"]
    if not path.is_file():
        return f"{entry['file']} is missing"
    if path.stat().st_size != entry["bytes"] or file_sha256(path) != entry["sha256"]:
        return f"{entry['file']} does not match its recorded sha256"
    try:
        arrays = read_shard(path)
    except (OSError, ValueError, KeyError) as error:
        return f"{entry['file']} does not decode: {error}"
    index = arrays["pool_index"]
    start, stop = entry["prompts"]["start"], entry["prompts"]["stop"]
    if (len(arrays["lengths"]) != entry["answers"] or str(arrays["ids"].dtype) != entry["id_dtype"]
            or int(arrays["prompt_lens"].sum()) != entry["prompt_tokens"]
            or len(arrays["ids"]) - entry["prompt_tokens"] != entry["answer_tokens"]
            or (len(index) and (index.min() < start or index.max() >= stop))):
        return f"{entry['file']} holds other records than its entry describes"
    return None


def open_corpus(directory: Path, header: dict, *, repair: bool = True) -> tuple[dict, list[str]]:
    """The corpus manifest in `directory` (a new one from `header` when there is none), keeping only shards
    that verify. Returns (manifest, problems found). With `repair`, untrusted entries are dropped from the
    manifest (which is rewritten) and untrusted files (not in the manifest, temporary, failed) deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(directory)
    if manifest is None:
        manifest = new_manifest(header)
    else:
        check_compatible(manifest, header, directory)
    problems, kept = [], []
    for entry in manifest["shards"]:
        reason = verify_entry(directory, entry)
        if reason is None:
            kept.append(entry)
        else:
            problems.append(reason)
    known = {entry["file"] for entry in kept}
    doomed = [directory / entry["file"] for entry in manifest["shards"] if entry not in kept]
    for path in sorted(directory.iterdir()):
        if path.name == MANIFEST or path.name in known or path in doomed:
            continue
        if SHARD_NAME.match(path.name):
            problems.append(f"{path.name} is not in the manifest (an interrupted run)")
            doomed.append(path)
        elif path.name.startswith(".") and path.name.endswith(".tmp"):
            problems.append(f"{path.name} is a partly written file")
            doomed.append(path)
    if repair:
        for path in doomed:
            path.unlink(missing_ok=True)
        if kept != manifest["shards"] or not (directory / MANIFEST).exists():
            manifest = {**manifest, "shards": kept}
            write_manifest(directory, manifest)
    return {**manifest, "shards": kept}, problems


def append_shard(directory: Path, manifest: dict, entry: dict) -> dict:
    """Record a written shard in the manifest (atomically); returns the new manifest."""
    updated = {**manifest, "shards": [*manifest["shards"], entry]}
    write_manifest(directory, updated)
    return updated


def drop_shards(directory: Path, manifest: dict, entries: Sequence[dict]) -> dict:
    """Remove shards from the manifest (rewritten atomically first) and delete their files; returns the new manifest."""
    files = {entry["file"] for entry in entries}
    updated = {**manifest, "shards": [e for e in manifest["shards"] if e["file"] not in files]}
    write_manifest(directory, updated)
    for name in files:
        (directory / name).unlink(missing_ok=True)
    return updated


def plan_shards(manifest: dict, prompts: int, shard_prompts: int) -> list[tuple[int, int]]:
    """The [start, stop) ranges, in pool order, that answer the first `prompts` pool prompts not yet in a shard:
    runs of unanswered indices cut into pieces of at most `shard_prompts` (a gap left by a dropped shard is
    filled first, since it comes first)."""
    if shard_prompts < 1:
        raise ConfigError(f"generate.shard_prompts must be positive, got {shard_prompts}")
    answered = np.zeros(prompts, dtype=bool)
    for entry in manifest["shards"]:
        answered[entry["prompts"]["start"]:min(entry["prompts"]["stop"], prompts)] = True
    ranges, i = [], 0
    while i < prompts:
        if answered[i]:
            i += 1
            continue
        stop = i
        while stop < prompts and not answered[stop] and stop - i < shard_prompts:
            stop += 1
        ranges.append((i, stop))
        i = stop
    return ranges


def holdout_score(key: int, seed: int) -> float:
    """A pool index's draw in [0, 1): the training holds a record out when it is below the held-out fraction, so a
    key's side depends only on the key and the seed and held-out prompts stay held out as the corpus grows."""
    return random.Random(seed * 1_000_003 + key).random()


def split_holdout(keys: Sequence[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) positions of `keys` (pool indices) by `holdout_score`; at least one position is held out."""
    scores = [holdout_score(key, seed) for key in keys]
    held = [i for i, score in enumerate(scores) if score < fraction] or [min(range(len(keys)), key=scores.__getitem__)]
    chosen = set(held)
    return [i for i in range(len(keys)) if i not in chosen], held


def summary(manifest: dict) -> dict:
    """Totals over the shards: answers, prompt and answer tokens, bytes, generation seconds."""
    shards = manifest["shards"]
    return {"shards": len(shards), **{key: sum(e[key] for e in shards) for key in
                                      ("answers", "prompt_tokens", "answer_tokens", "bytes", "seconds")}}


def load(directory: Path, manifest: dict, mode_names: Sequence[str], categories: Sequence[str]) -> dict:
    """Every record of the corpus's shards as the training pipeline's dict of lists: input_ids ([L] int32
    tensors: prompt then answer), prompt_len, mode (name), category, pool_index; in pool order."""
    data: dict[str, list] = {"input_ids": [], "prompt_len": [], "mode": [], "category": [], "pool_index": []}
    for entry in sorted(manifest["shards"], key=lambda e: e["prompts"]["start"]):
        arrays = read_shard(directory / entry["file"])
        for (ids, plen), mode, category, index in zip(records(arrays), arrays["mode"], arrays["category"],
                                                      arrays["pool_index"]):
            data["input_ids"].append(torch.from_numpy(ids.astype(np.int32)))
            data["prompt_len"].append(plen)
            data["mode"].append(mode_names[int(mode)])
            data["category"].append(categories[int(category)])
            data["pool_index"].append(int(index))
    return data


# ----------------------------------------------------------------------------------------------------
# Provenance
# ----------------------------------------------------------------------------------------------------


def cpu_has_fast_bf16() -> bool:
    """True when the CPU computes in bf16 natively (AMX or AVX-512 BF16), where bf16 generation pays off."""
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def machine() -> dict:
    """The machine a shard was generated on: CPU model, cores, torch threads, bf16 support, torch version."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "bf16": sorted({"amx_bf16", "avx512_bf16"} & cpu_flags()), "torch": torch.__version__,
            "platform": platform.platform()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def target_files(name_or_path: str) -> dict:
    """What identifies a target's weights: the default target's GGUF (name and sha256), the sha256 of a model
    directory's weight files, or just the name of a built-in random model."""
    from treespec import models

    if name_or_path == models.DEFAULT_TARGET:
        gguf = models.default_target_gguf()
        return {gguf.name: file_sha256(gguf)}
    path = Path(name_or_path)
    if path.is_dir():
        weights = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
        if weights:
            return {p.name: file_sha256(p) for p in weights}
    return {"name": str(name_or_path)}
