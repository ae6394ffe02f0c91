"""Measure what a batch costs: t(B, n), one target pass over B rows of n tree tokens each, and the draft's
cost for B frontiers, as `generate_batch` runs them.

A target pass is timed as the batched engine makes it (`mask.flatten_batch` over a right-padded cache of
B rows of `prefix_len` tokens, a chain of n nodes per row, logits for all B * n nodes) and then undone.
A draft step is one tree level of w nodes per row (w in `draft_widths`: c_B(w), the cost of B frontiers
of width w) through the batched drafter (so an EAGLE head is timed as it drafts, mask building included).
With `overheads`, the engine's own work per batched step (verification and commit of B rows, Python) is
measured too, for a speculative and an autoregressive step (`measure_batch_overheads`). Measurements are
interleaved (every repeat times every (B, n) once) and summarised by medians.
`BatchLatencyProfile.at_batch(B)` is a plain `LatencyProfile` (t_B(n), c_B(w) and the overheads in ms, so
that its `step_costs()` are relative to the B-row 1-token pass), the input of the hardware-aware tree
choice at that B (`treespec.batch_plan.plan_for_batch`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import PreTrainedModel

from treespec.batch import BatchDecoder
from treespec.batch_draft import make_batch_drafter
from treespec.cache import commit_rows, new_cache
from treespec.errors import ConfigError
from treespec.latency import LatencyProfile, planner_pass_ms
from treespec.mask import flatten_batch
from treespec.tree import chain


@dataclass(frozen=True)
class BatchLatencyProfile:
    target_ms: dict[int, dict[int, float]]  # [B][n]: median ms of a target pass over B rows of n tree tokens
    draft_ms: dict[int, float]  # [B]: median ms of one draft level of one node per row (empty: no draft)
    settings: dict[str, Any] = field(default_factory=dict)
    draft_width_ms: dict[int, dict[int, float]] = field(default_factory=dict)  # [B][w]: a level of w nodes per row
    overhead_ms: dict[int, float] = field(default_factory=dict)  # [B]: engine work per speculative batched step
    baseline_overhead_ms: dict[int, float] = field(default_factory=dict)  # [B]: per autoregressive batched step

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.target_ms)

    def at_batch(self, batch: int) -> LatencyProfile:
        """The profile for batch size `batch`: t(n) and c relative to that batch's 1-token pass."""
        if batch not in self.target_ms:
            raise ConfigError(f"batch size {batch} was not measured (measured: {self.batch_sizes})")
        return LatencyProfile(dict(self.target_ms[batch]), self.draft_ms.get(batch, 0.0),
                              {**self.settings, "batch_size": batch}, dict(self.draft_width_ms.get(batch, {})),
                              self.overhead_ms.get(batch, 0.0), self.baseline_overhead_ms.get(batch, 0.0))

    def relative_latency(self) -> dict[int, dict[int, float]]:
        """[B][n]: t(B, n) relative to the single-sequence 1-token pass t(1, 1) (needs B = 1 measured)."""
        if 1 not in self.target_ms:
            raise ConfigError(f"t(B, n) relative to t(1, 1) needs batch size 1 measured (measured: {self.batch_sizes})")
        base = self.target_ms[1][1]
        return {b: {n: ms / base for n, ms in sorted(row.items())} for b, row in sorted(self.target_ms.items())}

    def per_row_ms(self) -> dict[int, dict[int, float]]:
        """[B][n]: ms of a pass per row, the price of a tree of n nodes for one sequence in a batch of B."""
        return {b: {n: ms / b for n, ms in row.items()} for b, row in sorted(self.target_ms.items())}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_ms"] = {int(b): {int(n): round(v, 4) for n, v in row.items()} for b, row in self.target_ms.items()}
        data["draft_ms"] = {int(b): round(v, 4) for b, v in self.draft_ms.items()}
        data["draft_width_ms"] = {int(b): {int(w): round(v, 4) for w, v in row.items()}
                                  for b, row in self.draft_width_ms.items()}
        for key in ("overhead_ms", "baseline_overhead_ms"):
            data[key] = {int(b): round(v, 4) for b, v in getattr(self, key).items()}
        return data

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchLatencyProfile:
        try:
            target_ms = {int(b): {int(n): float(v) for n, v in row.items()} for b, row in data["target_ms"].items()}
            if not target_ms or any(1 not in row for row in target_ms.values()):
                raise KeyError("target_ms[B][1]")
            draft_ms = {int(b): float(v) for b, v in (data.get("draft_ms") or {}).items()}
            widths = {int(b): {int(w): float(v) for w, v in row.items()}
                      for b, row in (data.get("draft_width_ms") or {}).items()}
            overheads = [{int(b): float(v) for b, v in (data.get(key) or {}).items()}
                         for key in ("overhead_ms", "baseline_overhead_ms")]
            return cls(target_ms, draft_ms, dict(data.get("settings") or {}), widths, *overheads)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ConfigError(f"not a batch latency profile (needs target_ms[B] with n = 1 for every B): {err}") from err

    @classmethod
    def from_yaml(cls, path: str | Path) -> BatchLatencyProfile:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_pass(model: PreTrainedModel, cache, rows: int, prefix_len: int, n: int, generator: torch.Generator) -> float:
    """Seconds for one forward of `rows` chains of n tree tokens on top of the cache, then undo it."""
    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.randint(0, vocab, (rows, n), generator=generator).to(device)
    parents, depths = [tuple(range(-1, n - 1))] * rows, [tuple(range(n))] * rows
    flat = flatten_batch(tokens, parents, depths, [prefix_len] * rows, prefix_len, next(model.parameters()).dtype)
    _synchronise(device)
    start = time.perf_counter()
    model(input_ids=flat.input_ids, position_ids=flat.position_ids, attention_mask=flat.attention_mask,
          cache=cache, use_cache=True)
    _synchronise(device)
    elapsed = time.perf_counter() - start
    commit_rows(cache, [prefix_len] * rows, prefix_len, [[] for _ in range(rows)])
    return elapsed


def _timed_draft_step(drafter, prompts: list[list[int]], device: torch.device, width: int = 1) -> float:
    """Seconds for one draft level of `width` nodes per row (children of the root) after a fresh prefill."""
    drafter.reset(prompts)
    drafter.root_logits([p[-1] for p in prompts])
    nodes = list(range(1, width + 1))
    _synchronise(device)
    start = time.perf_counter()
    drafter.node_logits([(nodes, [p[i % len(p)] for i in range(width)], [0] * width) for p in prompts])
    _synchronise(device)
    return time.perf_counter() - start


@torch.inference_mode()
def measure_batch_latency(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    *,
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16),
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
    draft_widths: Sequence[int] = (1,),
    prefix_len: int = 400,
    repeats: int = 7,
    warmup: int = 2,
    seed: int = 0,
    overheads: bool = False,
    max_seconds: float | None = None,
    settings: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchLatencyProfile:
    """Median target pass times t(B, n) for every batch size and tree size, and of one batched draft level of
    w nodes per row for every B and width w; with `overheads`, the engine's per-step work per B too. With
    `max_seconds`, rounds stop early once that much time has passed and at least two were timed."""
    batch_sizes = sorted({int(b) for b in batch_sizes})
    sizes = sorted({int(n) for n in sizes} | {1})
    widths = sorted({int(w) for w in draft_widths} | {1}) if draft is not None else []
    if not batch_sizes or batch_sizes[0] < 1 or sizes[0] < 1 or prefix_len < 1 or repeats < 1 or (widths and widths[0] < 1):
        raise ConfigError("batch_sizes, sizes, draft widths, prefix_len and repeats must be >= 1")
    generator = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    vocab = target.config.get_text_config().vocab_size
    max_len = prefix_len + max(sizes + widths) + 2
    caches = {}
    for rows in batch_sizes:
        caches[rows] = new_cache(target, max_len)
        prefix = torch.randint(0, vocab, (rows, prefix_len), generator=generator).to(device)
        target(input_ids=prefix, cache=caches[rows], use_cache=True)
    drafter = make_batch_drafter(draft, target, max_len) if draft is not None else None
    prompts = torch.randint(0, vocab, (max(batch_sizes), prefix_len), generator=generator).tolist()
    samples: dict[int, dict[int, list[float]]] = {b: {n: [] for n in sizes} for b in batch_sizes}
    draft_samples: dict[int, dict[int, list[float]]] = {b: {w: [] for w in widths} for b in batch_sizes}
    start = time.perf_counter()
    for rep in range(warmup + repeats):
        if max_seconds is not None and rep - warmup >= 2 and time.perf_counter() - start > max_seconds:
            break
        for rows in batch_sizes:
            for n in sizes:
                elapsed = _timed_pass(target, caches[rows], rows, prefix_len, n, generator)
                if rep >= warmup:
                    samples[rows][n].append(elapsed)
            for w in widths:
                elapsed = _timed_draft_step(drafter, prompts[:rows], device, w)
                if rep >= warmup:
                    draft_samples[rows][w].append(elapsed)
        if progress is not None:
            progress(rep)
    info = {"device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
            "prefix_len": prefix_len, "repeats": len(samples[batch_sizes[0]][1]), "threads": torch.get_num_threads(),
            **(settings or {})}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    width_ms = {b: {w: 1000 * statistics.median(v) for w, v in row.items()} for b, row in draft_samples.items() if widths}
    profile = BatchLatencyProfile(
        {b: {n: 1000 * statistics.median(v) for n, v in row.items()} for b, row in samples.items()},
        {b: row[1] for b, row in width_ms.items()},
        info,
        width_ms,
    )
    if overheads:
        measured = {b: measure_batch_overheads(target, draft, profile, b, prefix_len=prefix_len, seed=seed)
                    for b in batch_sizes}
        profile = replace(profile, overhead_ms={b: o for b, (o, _) in measured.items()},
                          baseline_overhead_ms={b: o1 for b, (_, o1) in measured.items()})
    return profile


@torch.inference_mode()
def measure_batch_overheads(target: PreTrainedModel, draft: PreTrainedModel | None, profile: BatchLatencyProfile,
                            batch: int, *, prefix_len: int = 400, steps: int = 12, seed: int = 0) -> tuple[float, float]:
    """(o_B, o_B,1) in ms: the batched engine's own work per step at batch size `batch` (verifying and committing
    B rows, Python), as `generate_batch`'s mean step time minus the pass times `profile.at_batch(batch)` predicts:
    a chain of 2 with the draft (speculative) and autoregressive. Random prompts make acceptance rare and no row
    stops early (no EOS), so every step runs all B rows and drafts the whole chain."""
    generator = torch.Generator().manual_seed(seed + 1)
    vocab = target.config.get_text_config().vocab_size
    prompts = torch.randint(0, vocab, (batch, prefix_len), generator=generator).tolist()

    def mean_step_ms(tree) -> float:
        for tokens in (3, steps):  # the first call warms up; room for 3 tokens a step keeps every row to the end
            decoder = BatchDecoder(target, draft if tree is not None else None, prompts, tree=tree,
                                   max_new_tokens=3 * tokens, eos_token_id=[])
            start, passes = decoder.clock(), 0
            while decoder.live and passes < tokens:
                decoder.step()
                passes += 1
            elapsed = decoder.clock() - start
        return 1000 * elapsed / passes

    at_batch = profile.at_batch(batch)
    baseline = max(0.0, mean_step_ms(None) - at_batch.target_ms[1])
    if draft is None:
        return 0.0, baseline
    return max(0.0, mean_step_ms(chain(2)) - planner_pass_ms(at_batch, chain(2))), baseline
