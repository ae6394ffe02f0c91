"""Plans for a batch: the tree that maximises predicted tokens per second at batch size B, every cost priced at B.

One batched step of B rows costs, in units of the B-row 1-token target pass (t_B(1) = 1):

    step_B(tree) = t_B(n) / t_B(1) + sum_l c_B(w_l) / t_B(1) + o_B          (o_B: the engine's work per step)

and the baseline is a one-node tree at the same B (treespec's batched autoregressive loop): 1 + o_B,1. These
are `BatchLatencyProfile.at_batch(B).step_costs()`; `plan_for_batch` hands them to `planner.plan_tree`, which
keeps the budget / depth limit the caller set, chooses the rest, and returns a one-node tree (no speculation)
where no tree is predicted to beat it. As B grows the target's pass stops being free (t_B(n) rises sooner), so
the best tree shrinks, and at some B trees stop paying.

`auto_batch_profile` measures the batch profile on demand (`measure_batch_latency`, with the batched engine's
overheads) for the models as configured, and caches it beside hardware=auto's profiles under
`$TREESPEC_CACHE/profiles/`, keyed by the same device / torch / threads / model fingerprints plus the models'
dtype and layout, the prefix length, the batch sizes and tree sizes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from treespec.batch_latency import BatchLatencyProfile, measure_batch_latency
from treespec.errors import ConfigError
from treespec.hardware import describe_device, device_identity, model_fingerprint, precision_name, profiles_dir, write_cache
from treespec.latency import DRAFT_WIDTHS
from treespec.layouts import linear_layout
from treespec.models import attention_names, dtype_name
from treespec.optimizer import level_widths
from treespec.planner import Plan, StepCosts, plan_tree

BATCH_PROFILE_VERSION = 1  # bump when what a batch profile measures changes
CPU_BATCH_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # tree sizes n timed per B on a CPU
GPU_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def batch_step_costs(profile: BatchLatencyProfile, batch_size: int) -> StepCosts:
    """The planner's costs at batch size B: t_B(n) / t_B(1), c_B(w) / t_B(1), o_B and o_B,1 / t_B(1)."""
    return profile.at_batch(int(batch_size)).step_costs()


@dataclass(frozen=True)
class BatchPlan:
    """The tree chosen for batch size B, what it is predicted to do, and the batched autoregressive baseline."""

    batch_size: int
    plan: Plan
    pass_ms: float  # t_B(1): one target pass of B rows of one token, in ms

    @property
    def tree(self):
        return self.plan.tree

    @property
    def speculates(self) -> bool:
        """False where the plan fell back to a one-node tree (speculation does not pay at this B)."""
        return self.plan.tree.size > 1

    @property
    def predicted_tokens_per_second(self) -> float:
        """All rows together: B * G / (t_B(1) * step_B(tree))."""
        return 1000 * self.batch_size * self.plan.expected_tokens / (self.pass_ms * self.plan.step_cost)

    @property
    def baseline_tokens_per_second(self) -> float:
        """Batched autoregressive decoding at this B (the one-node tree), predicted: B / (t_B(1) * (1 + o_B,1))."""
        return self.predicted_tokens_per_second / self.plan.predicted_speedup

    def describe(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, **self.plan.describe(), "speculates": self.speculates,
                "pass_ms": round(self.pass_ms, 4),
                "predicted_tokens_per_second": round(self.predicted_tokens_per_second, 3),
                "predicted_autoregressive_tokens_per_second": round(self.baseline_tokens_per_second, 3)}


def plan_for_batch(accept, profile: BatchLatencyProfile, batch_size: int, *, budget: int | None = None,
                   max_depth: int | None = None, max_budget: int | None = None, **options) -> BatchPlan:
    """`plan_tree` with the costs of batch size B (see the module docstring); budget / max_depth given are kept.
    max_budget defaults to the largest tree size measured at B; `options` go to `plan_tree`."""
    costs = batch_step_costs(profile, batch_size)
    measured = max(profile.target_ms[int(batch_size)])
    max_budget = int(max_budget) if max_budget is not None else measured
    plan = plan_tree(accept, costs, budget=budget, max_depth=max_depth, max_budget=max_budget,
                     max_depth_limit=options.pop("max_depth_limit", min(12, max_budget)), **options)
    return BatchPlan(int(batch_size), plan, profile.target_ms[int(batch_size)][1])


def plan_batches(accept, profile: BatchLatencyProfile, batch_sizes: Sequence[int] | None = None,
                 **options) -> dict[int, BatchPlan]:
    """`plan_for_batch` for every batch size (default: every measured one)."""
    return {int(b): plan_for_batch(accept, profile, b, **options) for b in (batch_sizes or profile.batch_sizes)}


def plan_rows(plans: dict[int, BatchPlan]) -> list[dict[str, Any]]:
    """One row per batch size: the chosen tree and its predictions (the report of the choice per B)."""
    rows = []
    for b, plan in sorted(plans.items()):
        rows.append({"batch_size": b, "budget": plan.plan.budget, "depth": plan.plan.depth,
                     "widths": list(level_widths(plan.tree)) if plan.speculates else [1],
                     "speculates": plan.speculates,
                     "predicted_tokens_per_pass": round(plan.plan.expected_tokens, 4),
                     "predicted_speedup": round(plan.plan.predicted_speedup, 4),
                     "predicted_tokens_per_second": round(plan.predicted_tokens_per_second, 3),
                     "predicted_autoregressive_tokens_per_second": round(plan.baseline_tokens_per_second, 3)})
    return rows


def format_plan_rows(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table of `plan_rows` (B, tree, predicted tokens/pass, speedup over batched AR, tokens/s)."""
    header = ("B", "tree", "widths", "pred. tok/pass", "pred. vs AR", "pred. tok/s", "pred. AR tok/s")
    lines = [header]
    for r in rows:
        tree = f"n={r['budget']} d={r['depth']}" if r["speculates"] else "none (autoregressive)"
        lines.append((str(r["batch_size"]), tree, " ".join(map(str, r["widths"])), f"{r['predicted_tokens_per_pass']:.2f}",
                      f"{r['predicted_speedup']:.2f}x", f"{r['predicted_tokens_per_second']:.1f}",
                      f"{r['predicted_autoregressive_tokens_per_second']:.1f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def _read_batch_cache(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    try:
        entry = yaml.safe_load(path.read_text())
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        BatchLatencyProfile.from_dict(entry["profile"])
        return entry
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, ConfigError):
        return None


def batch_cache_key(target: torch.nn.Module, draft: torch.nn.Module | None, *, batch_sizes: Sequence[int],
                    sizes: Sequence[int], prefix_len: int) -> dict[str, Any]:
    """What a batch profile depends on: hardware=auto's key (device, torch, threads, models) with the dtype and
    layout the models are in, their attention implementations, and the batch sizes, tree sizes and prefix length
    measured."""
    device = next(target.parameters()).device
    return {"version": BATCH_PROFILE_VERSION, "kind": "batch", "device": device_identity(device),
            "torch": str(torch.__version__), "threads": torch.get_num_threads(),
            "target": model_fingerprint(target), "draft": model_fingerprint(draft) if draft is not None else None,
            "target_dtype": dtype_name(target), "target_layout": linear_layout(target),
            "draft_dtype": precision_name(draft) if draft is not None else None,
            "draft_layout": linear_layout(draft) if draft is not None else None,
            "attention": attention_names(target, draft), "prefix_len": int(prefix_len),
            "batch_sizes": sorted({int(b) for b in batch_sizes}),
            "sizes": sorted({int(n) for n in sizes} | {1})}


def batch_cache_path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return profiles_dir() / f"batch-{digest}.yaml"


def auto_batch_profile(target: torch.nn.Module, draft: torch.nn.Module | None, batch_sizes: Sequence[int], *,
                       sizes: Sequence[int] | None = None, prefix_len: int = 400, repeats: int = 5, warmup: int = 1,
                       max_seconds: float | None = 120.0, remeasure: bool = False, settings: dict[str, Any] | None = None,
                       progress: Callable[[str, int, int], None] | None = None) -> tuple[BatchLatencyProfile, str]:
    """(the batch profile of these models as configured, where it came from): cached, or measured now
    (t_B(n), c_B(w) for w in 1..16, and the batched engine's overheads for every B; the timed rounds stop
    after `max_seconds` once two were taken) and cached."""
    device = next(target.parameters()).device
    sizes = tuple(sizes or (GPU_BATCH_SIZES if device.type == "cuda" else CPU_BATCH_SIZES))
    key = batch_cache_key(target, draft, batch_sizes=batch_sizes, sizes=sizes, prefix_len=prefix_len)
    path = batch_cache_path(key)
    entry = None if remeasure else _read_batch_cache(path, key)
    if entry is not None:
        return BatchLatencyProfile.from_dict(entry["profile"]), f"cached from {entry['measured_at']} ({path})"
    start = time.perf_counter()
    total = warmup + repeats

    def tick(rep: int) -> None:
        if progress is not None:
            progress(f"batch sizes {key['batch_sizes']}", rep + 1, total)

    profile = measure_batch_latency(target, draft, batch_sizes=key["batch_sizes"], sizes=sizes,
                                    draft_widths=DRAFT_WIDTHS if draft is not None else (1,), prefix_len=prefix_len,
                                    repeats=repeats, warmup=warmup, overheads=True, max_seconds=max_seconds,
                                    settings={**(settings or {}), "machine": describe_device(key["device"]),
                                              "layout": key["target_layout"], "draft_layout": key["draft_layout"]},
                                    progress=tick)
    seconds = time.perf_counter() - start
    profile = BatchLatencyProfile(profile.target_ms, profile.draft_ms,
                                  {**profile.settings, "measured_seconds": round(seconds, 1)}, profile.draft_width_ms,
                                  profile.overhead_ms, profile.baseline_overhead_ms)
    measured_at = datetime.datetime.now().isoformat(timespec="seconds")
    write_cache(path, {"key": key, "measured_at": measured_at, "profile": profile.to_dict()})
    return profile, f"measured now ({seconds:.1f} s; cached in {path})"
