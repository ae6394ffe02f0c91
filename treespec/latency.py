"""Measure t(n) and c on this hardware, and store them as a profile for the hardware-aware optimizer.

t(n) = time of one target pass over n tree tokens (on a cache of `prefix_len` tokens, the engine's tree
mask) / time of a 1-token pass;  c = time of one draft step (one token, the drafter's call) / time of a
1-token target pass. Measurements are interleaved (every repeat times every size once) and summarised by
medians, because timings on shared machines drift.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import PreTrainedModel

from treespec.cache import commit, new_cache
from treespec.draft import Drafter
from treespec.engine import make_drafter
from treespec.errors import ConfigError
from treespec.mask import flatten


@dataclass(frozen=True)
class LatencyProfile:
    target_ms: dict[int, float]  # median ms of a target pass over n tree tokens
    draft_ms: float  # median ms of one draft step (0 when no draft was measured)
    settings: dict[str, Any] = field(default_factory=dict)  # device, dtype, prefix_len, repeats, model names

    @property
    def relative_latency(self) -> dict[int, float]:
        """t(n): target pass time over n tokens / 1-token pass time."""
        base = self.target_ms[1]
        return {n: ms / base for n, ms in sorted(self.target_ms.items())}

    @property
    def draft_cost(self) -> float:
        """c: one draft step / one 1-token target pass."""
        return self.draft_ms / self.target_ms[1]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_ms"] = {int(k): round(v, 4) for k, v in self.target_ms.items()}
        data["relative_latency"] = {int(k): round(v, 4) for k, v in self.relative_latency.items()}
        data["draft_cost"] = round(self.draft_cost, 5)
        return data

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyProfile:
        try:
            target_ms = {int(k): float(v) for k, v in data["target_ms"].items()}
            if 1 not in target_ms:
                raise KeyError("target_ms[1]")
            return cls(target_ms, float(data.get("draft_ms", 0.0)), dict(data.get("settings") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ConfigError(f"not a latency profile (needs target_ms with n = 1, and draft_ms): {err}") from err

    @classmethod
    def from_yaml(cls, path: str | Path) -> LatencyProfile:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _prefilled_cache(model: PreTrainedModel, prefix_len: int, max_len: int, generator: torch.Generator):
    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    cache = new_cache(model, max_len)
    prefix = torch.randint(0, vocab, (1, prefix_len), generator=generator).to(device)
    model(input_ids=prefix, cache=cache, use_cache=True)
    return cache


def _timed_pass(model: PreTrainedModel, cache, prefix_len: int, n: int, generator: torch.Generator) -> float:
    """Seconds for one forward of n tree tokens (a chain mask) on top of the cache, then undo it."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.randint(0, vocab, (n,), generator=generator).to(device)
    flat = flatten(tokens, tuple(range(-1, n - 1)), tuple(range(n)), prefix_len, dtype)
    _synchronise(device)
    start = time.perf_counter()
    model(input_ids=flat.input_ids, position_ids=flat.position_ids, attention_mask=flat.attention_mask,
          cache=cache, use_cache=True)
    _synchronise(device)
    elapsed = time.perf_counter() - start
    commit(cache, prefix_len, [])
    return elapsed


def _timed_draft_step(drafter: Drafter, prefix: list[int], device: torch.device) -> float:
    """Seconds for one draft level of one node (the engine's own drafting call) after a fresh prefill."""
    drafter.reset(prefix)
    drafter.root_logits(prefix[-1])
    _synchronise(device)
    start = time.perf_counter()
    drafter.node_logits([1], [prefix[0]], [0])
    _synchronise(device)
    return time.perf_counter() - start


@torch.inference_mode()
def measure_latency(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    *,
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    prefix_len: int = 400,
    repeats: int = 7,
    warmup: int = 2,
    seed: int = 0,
    settings: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> LatencyProfile:
    """Median pass times of the target over each tree size, and of one draft step, interleaved.

    The draft step is timed through the engine's drafter (so an EAGLE head is timed as it drafts, mask
    building included) as one tree level of one node on top of a prefix_len prefix.
    """
    sizes = sorted({int(n) for n in sizes} | {1})
    if sizes[0] < 1 or prefix_len < 1 or repeats < 1:
        raise ConfigError("sizes, prefix_len and repeats must be >= 1")
    generator = torch.Generator().manual_seed(seed)
    max_len = prefix_len + max(sizes)
    target_cache = _prefilled_cache(target, prefix_len, max_len, generator)
    drafter = make_drafter(draft, target, max_len) if draft is not None else None
    vocab = target.config.get_text_config().vocab_size
    draft_prefix = torch.randint(0, vocab, (prefix_len,), generator=generator).tolist()
    device = next(target.parameters()).device
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    draft_samples: list[float] = []
    for rep in range(warmup + repeats):
        for n in sizes:
            elapsed = _timed_pass(target, target_cache, prefix_len, n, generator)
            if rep >= warmup:
                samples[n].append(elapsed)
        if drafter is not None:
            elapsed = _timed_draft_step(drafter, draft_prefix, device)
            if rep >= warmup:
                draft_samples.append(elapsed)
        if progress is not None:
            progress(rep)
    info = {"device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
            "prefix_len": prefix_len, "repeats": repeats, "threads": torch.get_num_threads(), **(settings or {})}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    return LatencyProfile(
        {n: 1000 * statistics.median(v) for n, v in samples.items()},
        1000 * statistics.median(draft_samples) if draft_samples else 0.0,
        info,
    )
