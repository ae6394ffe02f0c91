"""Measure what a decoding step costs on this hardware, and store it as a profile for the planner.

t(n) = time of one target pass over n tree tokens (on a cache of `prefix_len` tokens, the engine's tree
mask) / time of a 1-token pass;  c(w) = time of one draft level expanding w nodes (the drafter's own call)
/ time of a 1-token target pass; and the engine's fixed work per step (verification, commit, Python), for a
speculative step and for an autoregressive one. Measurements are interleaved (every repeat times every
size once) and summarised by medians, because timings on shared machines drift.
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

from treespec.cache import commit, new_cache
from treespec.draft import Drafter, StepOutcome
from treespec.engine import make_drafter, target_pass
from treespec.errors import ConfigError
from treespec.lean_decoder import LeanDecoder, lean_decoder
from treespec.mask import flatten
from treespec.optimizer import level_widths
from treespec.planner import StepCosts
from treespec.tree import TreeShape, chain

DRAFT_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class LatencyProfile:
    target_ms: dict[int, float]  # median ms of a target pass over n tree tokens
    draft_ms: float  # median ms of one draft level of one node (0 when no draft was measured)
    settings: dict[str, Any] = field(default_factory=dict)  # device, dtype, layout, prefix_len, repeats, models
    draft_width_ms: dict[int, float] = field(default_factory=dict)  # median ms of one draft level of w nodes
    overhead_ms: float = 0.0  # engine work per speculative step outside the target pass and draft forwards
    baseline_overhead_ms: float = 0.0  # engine work per autoregressive step outside the target pass

    @property
    def relative_latency(self) -> dict[int, float]:
        """t(n): target pass time over n tokens / 1-token pass time."""
        base = self.target_ms[1]
        return {n: ms / base for n, ms in sorted(self.target_ms.items())}

    @property
    def draft_cost(self) -> float:
        """c = c(1): one draft level of one node / one 1-token target pass."""
        return self.draft_ms / self.target_ms[1]

    @property
    def draft_costs(self) -> dict[int, float]:
        """c(w) for every measured width (just c(1) for profiles measured before widths were)."""
        widths = self.draft_width_ms or {1: self.draft_ms}
        return {w: ms / self.target_ms[1] for w, ms in sorted(widths.items())}

    def step_costs(self) -> StepCosts:
        """The planner's view of this profile: t(n), c(w) and overheads relative to the 1-token pass."""
        base = self.target_ms[1]
        return StepCosts(self.relative_latency, self.draft_costs, self.overhead_ms / base, self.baseline_overhead_ms / base)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["target_ms"] = {int(k): round(v, 4) for k, v in self.target_ms.items()}
        data["draft_width_ms"] = {int(k): round(v, 4) for k, v in self.draft_width_ms.items()}
        data["relative_latency"] = {int(k): round(v, 4) for k, v in self.relative_latency.items()}
        data["draft_cost"] = round(self.draft_cost, 5)
        data["draft_costs"] = {int(k): round(v, 5) for k, v in self.draft_costs.items()}
        for key in ("draft_ms", "overhead_ms", "baseline_overhead_ms"):
            data[key] = round(data[key], 4)
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
            widths = {int(k): float(v) for k, v in (data.get("draft_width_ms") or {}).items()}
            return cls(target_ms, float(data.get("draft_ms", 0.0)), dict(data.get("settings") or {}), widths,
                       float(data.get("overhead_ms", 0.0)), float(data.get("baseline_overhead_ms", 0.0)))
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


def _timed_pass(model: PreTrainedModel, cache, prefix_len: int, n: int, generator: torch.Generator,
                lean: LeanDecoder | None = None) -> float:
    """Seconds for one forward of n tree tokens (a chain mask) on top of the cache, then undo it: the engine's own
    target pass (through `lean`, treespec.lean_decoder's decoder for the model, where given)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.randint(0, vocab, (n,), generator=generator).to(device)
    flat = flatten(tokens, tuple(range(-1, n - 1)), tuple(range(n)), prefix_len, dtype)
    _synchronise(device)
    start = time.perf_counter()
    target_pass(model, lean, False, input_ids=flat.input_ids, position_ids=flat.position_ids,
                 attention_mask=flat.attention_mask, cache=cache)
    _synchronise(device)
    elapsed = time.perf_counter() - start
    commit(cache, prefix_len, [])
    return elapsed


def _timed_draft_levels(drafter: Drafter, prefix: list[int], widths: Sequence[int], device: torch.device
                        ) -> dict[int, float]:
    """Seconds of one draft level expanding w nodes (children of the root, the engine's own drafting call) for
    each width, on top of one prefill of `prefix`. Between widths the drafter is moved on by one step that
    accepts only the root (as in decoding); a drafter reading the target's features is prefilled anew instead
    (its prefill is a single layer, and it would need the target's features of the step)."""
    seconds = {}
    drafter.reset(prefix)
    root = prefix[-1]
    drafter.root_logits(root)
    for i, width in enumerate(widths):
        if i and getattr(drafter, "wants_target_hidden", False):
            drafter.reset(prefix)
            drafter.root_logits(root)
        elif i:
            bonus = prefix[i % len(prefix)]
            drafter.observe(StepOutcome((0,), (root,), bonus))
            root = bonus
            drafter.root_logits(root)
        nodes = list(range(1, width + 1))
        tokens = [prefix[j % len(prefix)] for j in range(width)]
        _synchronise(device)
        start = time.perf_counter()
        drafter.node_logits(nodes, tokens, [0] * width)
        _synchronise(device)
        seconds[width] = time.perf_counter() - start
    return seconds


@torch.inference_mode()
def measure_latency(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    *,
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    draft_widths: Sequence[int] = DRAFT_WIDTHS,
    prefix_len: int = 400,
    repeats: int = 7,
    warmup: int = 2,
    seed: int = 0,
    overheads: bool = False,
    max_seconds: float | None = None,
    settings: dict[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
    draft_vocab: torch.Tensor | None = None,
) -> LatencyProfile:
    """Median pass times of the target over each tree size and of a draft level of each width, interleaved;
    with `overheads`, also the engine's per-step work (`measure_overheads`).

    A draft level is timed through the engine's drafter (so an EAGLE head is timed as it drafts, mask
    building included) on top of a prefix_len prefix; `draft_vocab` [S]: a causal-LM draft scoring only those
    token ids (`treespec.vocab`). `progress(round)` is called after every round. With
    `max_seconds`, rounds stop early once that much time has passed and at least two were timed.
    """
    sizes = sorted({int(n) for n in sizes} | {1})
    widths = sorted({int(w) for w in draft_widths} | {1}) if draft is not None else []
    if sizes[0] < 1 or prefix_len < 1 or repeats < 1 or (widths and widths[0] < 1):
        raise ConfigError("sizes, draft widths, prefix_len and repeats must be >= 1")
    generator = torch.Generator().manual_seed(seed)
    max_len = prefix_len + max(sizes + widths) + len(widths) + 2
    target_cache = _prefilled_cache(target, prefix_len, max_len, generator)
    lean = lean_decoder(target)  # looked up once, as generate does
    drafter = make_drafter(draft, target, max_len, draft_vocab) if draft is not None else None
    vocab = target.config.get_text_config().vocab_size
    draft_prefix = torch.randint(0, vocab, (prefix_len,), generator=generator).tolist()
    device = next(target.parameters()).device
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    draft_samples: dict[int, list[float]] = {w: [] for w in widths}
    start = time.perf_counter()
    for rep in range(warmup + repeats):
        if max_seconds is not None and rep - warmup >= 2 and time.perf_counter() - start > max_seconds:
            break
        for n in sizes:
            elapsed = _timed_pass(target, target_cache, prefix_len, n, generator, lean)
            if rep >= warmup:
                samples[n].append(elapsed)
        if drafter is not None:
            for w, elapsed in _timed_draft_levels(drafter, draft_prefix, widths, device).items():
                if rep >= warmup:
                    draft_samples[w].append(elapsed)
        if progress is not None:
            progress(rep)
    info = {"device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
            "prefix_len": prefix_len, "repeats": len(samples[1]), "threads": torch.get_num_threads(), **(settings or {})}
    if draft is not None:
        info.setdefault("draft_dtype", str(next(draft.parameters()).dtype).replace("torch.", ""))
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    width_ms = {w: 1000 * statistics.median(v) for w, v in draft_samples.items()}
    profile = LatencyProfile({n: 1000 * statistics.median(v) for n, v in samples.items()}, width_ms.get(1, 0.0), info,
                             width_ms)
    if overheads:
        overhead, baseline = measure_overheads(target, draft, profile, prefix_len=prefix_len, seed=seed,
                                               draft_vocab=draft_vocab)
        profile = replace(profile, overhead_ms=overhead, baseline_overhead_ms=baseline)
    return profile


@torch.inference_mode()
def measure_overheads(target: PreTrainedModel, draft: PreTrainedModel | None, profile: LatencyProfile, *,
                      prefix_len: int = 400, steps: int = 12, seed: int = 0,
                      draft_vocab: torch.Tensor | None = None) -> tuple[float, float]:
    """(o, o_1) in ms: the engine's own work per step, as its decode loop's median step time (the first step,
    which also prefills a causal-LM draft, left out) minus the pass times `profile` predicts for that step:
    a chain of 2 with the draft (speculative) and autoregressive.
    Random prompts make acceptance rare, so every speculative step drafts the whole chain."""
    from treespec.engine import generate  # the engine imports this module's users; keep the import local

    generator = torch.Generator().manual_seed(seed + 1)
    vocab = target.config.get_text_config().vocab_size
    prompt = torch.randint(0, vocab, (prefix_len,), generator=generator).tolist()

    def median_step_ms(tree) -> float:
        vocab_arg = draft_vocab if tree is not None else None
        generate(target, draft if tree is not None else None, prompt, tree=tree, max_new_tokens=3,
                 draft_vocab=vocab_arg)  # warm-up
        out = generate(target, draft if tree is not None else None, prompt, tree=tree, max_new_tokens=steps,
                       draft_vocab=vocab_arg)
        timed = out.steps[1:] or out.steps  # a causal-LM draft reads the prompt during the first step
        return 1000 * statistics.median(s.draft_s + s.target_s + s.verify_s + s.commit_s for s in timed)

    baseline = max(0.0, median_step_ms(None) - profile.target_ms[1])
    if draft is None:
        return 0.0, baseline
    shape = chain(2)
    predicted = planner_pass_ms(profile, shape)
    return max(0.0, median_step_ms(shape) - predicted), baseline


def planner_pass_ms(profile: LatencyProfile, tree: TreeShape) -> float:
    """Target pass plus draft forwards of one step drafting `tree`, in ms, as the profile predicts them."""
    costs = profile.step_costs()
    base = profile.target_ms[1]
    return base * (costs.target_cost(tree.size) + sum(costs.draft_cost(w) for w in level_widths(tree)))
