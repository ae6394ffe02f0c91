"""What a decoding step costs on this hardware, for B >= 1 rows: measured, stored, and handed to the planner.

For batch size B (B = 1: one sequence):

    t(B, n)  = one target pass over B rows of n tree tokens each / the B-row 1-token pass
    c_B(w)   = one draft level expanding w nodes per row (the drafter's own call) / the B-row 1-token pass
    o_B      = the engine's own work per step (verification, commit, Python) / the same, speculative step
    o_B,1    = the same for an autoregressive step

`LatencyProfile` holds the measured milliseconds by batch size; `step_costs(B)` turns them into the planner's
`StepCosts` at B. `measure_latency` times the engine's own passes (treespec.decode.engine.target_forward over a
right-padded cache of B rows, the drafter's level calls), interleaved (every round times every (B, n) once) and
summarised by medians, because timings on shared machines drift; with `overheads`, `measure_overheads` times the
engine's steps too.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from transformers import PreTrainedModel

from treespec.api import generators
from treespec.decode.cache import commit, new_cache
from treespec.decode.engine import Decoder, StepOutcome, target_forward
from treespec.decode.mask import flatten
from treespec.decode.sampling import SamplingConfig
from treespec.decode.timing import Clock
from treespec.decode.tree import TreeShape, chain
from treespec.drafters import make_drafter
from treespec.drafters.policies import as_policy
from treespec.errors import ConfigError
from treespec.models.lean import lean_decoder
from treespec.plan.optimizer import expected_tokens, level_widths

DRAFT_WIDTHS = (1, 2, 4, 8, 16)


def interpolate_latency(relative_latency: Mapping[int, float], n: int) -> float:
    """t(n) from measured points (n -> pass time / 1-token pass time), linear between them and beyond."""
    points = sorted((int(k), float(v)) for k, v in relative_latency.items())
    if not points:
        raise ConfigError("the latency profile has no measured points")
    sizes = np.array([p[0] for p in points], dtype=np.float64)
    times = np.array([p[1] for p in points], dtype=np.float64)
    if n > sizes[-1]:
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]) if len(points) > 1 else 0.0
        return float(times[-1] + slope * (n - sizes[-1]))
    return float(np.interp(n, sizes, times))


@dataclass(frozen=True)
class StepCosts:
    """What the parts of one step cost at one batch size, relative to that batch's 1-token target pass.

    step(tree) = t(n) + sum_l c(w_l) + o, where the draft runs one forward per level l = 0 .. levels-2 expanding
    the w_l nodes of depth l that have children; a one-node (autoregressive) step costs 1 + o_1.
    """

    target: Mapping[int, float]  # t(n), with t(1) = 1
    draft: Mapping[int, float] = field(default_factory=lambda: {1: 0.0})  # c(w): a draft forward over w nodes
    overhead: float = 0.0  # o: engine work per speculative step
    baseline_overhead: float = 0.0  # o_1: engine work per autoregressive step
    batch_size: int = 1  # B, the rows these costs were measured for
    pass_ms: float | None = None  # the B-row 1-token pass in ms, when known (absolute tokens/s predictions)
    # (kind, size) -> the interpolated cost: a hybrid or prompt-lookup step prices dozens of sizes (its trie's cuts)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not self.target or 1 not in {int(k) for k in self.target}:
            raise ConfigError("step costs need t(n) measured at n = 1")
        if not self.draft or min(float(v) for v in self.draft.values()) < 0:
            raise ConfigError(f"draft costs c(w) must be given and >= 0, got {dict(self.draft)}")
        if self.overhead < 0 or self.baseline_overhead < 0:
            raise ConfigError("per-step overheads must be >= 0")

    def target_cost(self, n: int) -> float:
        """t(n), interpolated between the measured sizes (linear beyond the largest)."""
        key = ("target", n)
        if key not in self._memo:
            self._memo[key] = interpolate_latency(self.target, n)
        return self._memo[key]

    @property
    def autoregressive_tokens_per_second(self) -> float | None:
        """Predicted tokens/s of autoregressive decoding at this B, all rows: B / (t_B(1) * (1 + o_B,1)); None
        without the pass time."""
        if self.pass_ms is None:
            return None
        return 1000 * self.batch_size / (self.pass_ms * (self.target_cost(1) + self.baseline_overhead))

    @property
    def max_size(self) -> int:
        """The largest tree size n measured."""
        return max(int(n) for n in self.target)

    def draft_cost(self, width: int) -> float:
        """c(w), interpolated between measured widths (constant beyond a single measured point)."""
        if width <= 0:
            return 0.0
        key = ("draft", width)
        if key not in self._memo:
            self._memo[key] = max(0.0, interpolate_latency(self.draft, width))
        return self._memo[key]

    def affine_draft(self) -> tuple[float, float]:
        """(c0, c1), both >= 0, with c(w) ~ c0 + c1 * w fitted to the measured widths up to 16."""
        points = sorted((int(w), float(c)) for w, c in self.draft.items() if int(w) <= 16)
        if len(points) < 2:
            return float(points[0][1]) if points else 0.0, 0.0
        widths, costs = np.array(points).T
        slope, intercept = np.polyfit(widths, costs, 1)
        if intercept < 0:
            return 0.0, float(np.dot(widths, costs) / np.dot(widths, widths))
        if slope < 0:
            return float(costs.mean()), 0.0
        return float(intercept), float(slope)

    def step(self, tree: TreeShape) -> float:
        """The predicted cost of one step drafting and verifying `tree`."""
        if tree.size == 1:
            return self.target_cost(1) + self.baseline_overhead
        return self.target_cost(tree.size) + sum(self.draft_cost(w) for w in level_widths(tree)) + self.overhead

    def speedup(self, tree: TreeShape, accept) -> float:
        """Predicted tokens per second relative to autoregressive decoding with the same target at the same B."""
        gain = expected_tokens(tree, accept) if tree.size > 1 else 1.0
        return gain * (self.target_cost(1) + self.baseline_overhead) / self.step(tree)


def _by_batch(value, name: str) -> dict[int, Any]:
    """{B: ...} from a by-batch mapping; a value that is not one (a profile of one sequence, as written before
    batch sizes were part of every profile) is B = 1's."""
    if isinstance(value, Mapping) and value and all(isinstance(v, Mapping) for v in value.values()):
        return {int(b): v for b, v in value.items()}
    if isinstance(value, Mapping) and value and name in ("target_ms", "draft_width_ms"):
        return {1: value}
    if isinstance(value, Mapping):
        return {int(b): v for b, v in value.items()}
    return {1: value}


@dataclass(frozen=True)
class LatencyProfile:
    """Measured milliseconds by batch size B (see the module docstring)."""

    target_ms: dict[int, dict[int, float]]  # [B][n]: median ms of a target pass over B rows of n tree tokens
    draft_ms: dict[int, dict[int, float]] = field(default_factory=dict)  # [B][w]: one draft level, w nodes per row
    overhead_ms: dict[int, float] = field(default_factory=dict)  # [B]: engine work per speculative step
    baseline_overhead_ms: dict[int, float] = field(default_factory=dict)  # [B]: per autoregressive step
    settings: dict[str, Any] = field(default_factory=dict)  # device, dtype, layout, prefix_len, repeats, models

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.target_ms)

    def _check(self, batch_size: int) -> int:
        if int(batch_size) not in self.target_ms:
            raise ConfigError(f"batch size {batch_size} was not measured (measured: {self.batch_sizes})")
        return int(batch_size)

    def pass_ms(self, batch_size: int = 1) -> float:
        """t_B(1) in ms: one target pass of B rows of one token."""
        return self.target_ms[self._check(batch_size)][1]

    def relative_latency(self, batch_size: int = 1) -> dict[int, float]:
        """t(B, n) for every measured n."""
        base = self.pass_ms(batch_size)
        return {n: ms / base for n, ms in sorted(self.target_ms[int(batch_size)].items())}

    def draft_costs(self, batch_size: int = 1) -> dict[int, float]:
        """c_B(w) for every measured width ({} when no draft was measured)."""
        base = self.pass_ms(batch_size)
        return {w: ms / base for w, ms in sorted(self.draft_ms.get(int(batch_size), {}).items())}

    def draft_cost(self, batch_size: int = 1) -> float:
        """c = c_B(1): one draft level of one node per row / one 1-token target pass (0 without a draft)."""
        return self.draft_costs(batch_size).get(1, 0.0)

    def step_costs(self, batch_size: int = 1) -> StepCosts:
        """The planner's view of this profile at batch size B."""
        base = self.pass_ms(batch_size)
        return StepCosts(self.relative_latency(batch_size), self.draft_costs(batch_size) or {1: 0.0},
                         self.overhead_ms.get(int(batch_size), 0.0) / base,
                         self.baseline_overhead_ms.get(int(batch_size), 0.0) / base, int(batch_size), base)

    def merged(self, other: LatencyProfile) -> LatencyProfile:
        """This profile with `other`'s batch sizes added (other's values win where both measured a B)."""
        return LatencyProfile({**self.target_ms, **other.target_ms}, {**self.draft_ms, **other.draft_ms},
                              {**self.overhead_ms, **other.overhead_ms},
                              {**self.baseline_overhead_ms, **other.baseline_overhead_ms}, dict(self.settings))

    def to_dict(self) -> dict[str, Any]:
        def rounded(rows):
            return {int(b): {int(k): round(float(v), 4) for k, v in row.items()} for b, row in sorted(rows.items())}

        return {"target_ms": rounded(self.target_ms), "draft_ms": rounded(self.draft_ms),
                "overhead_ms": {int(b): round(v, 4) for b, v in sorted(self.overhead_ms.items())},
                "baseline_overhead_ms": {int(b): round(v, 4) for b, v in sorted(self.baseline_overhead_ms.items())},
                "settings": dict(self.settings),
                "relative_latency": {b: {n: round(t, 4) for n, t in self.relative_latency(b).items()}
                                     for b in self.batch_sizes},
                "draft_costs": {b: {w: round(c, 5) for w, c in self.draft_costs(b).items()} for b in self.batch_sizes}}

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyProfile:
        """Read `to_dict`'s format, and the formats written before batch sizes were part of every profile: one
        sequence's (target_ms {n: ms}, draft_ms: ms, draft_width_ms {w: ms}, overheads in ms) and a batch profile's
        (target_ms {B: {n: ms}}, draft_ms {B: ms}, draft_width_ms {B: {w: ms}}, overheads {B: ms})."""
        try:
            target = {b: {int(n): float(v) for n, v in row.items()} for b, row in
                      _by_batch(data["target_ms"], "target_ms").items()}
            if not target or any(1 not in row for row in target.values()):
                raise KeyError("target_ms[B][1]")
            draft = data.get("draft_ms")
            if isinstance(draft, Mapping) and draft and all(isinstance(v, Mapping) for v in draft.values()):
                widths = {int(b): {int(w): float(v) for w, v in row.items()} for b, row in draft.items()}
            else:  # older formats: the widths under draft_width_ms, c(1) alone under draft_ms
                widths = {b: {int(w): float(v) for w, v in row.items()} for b, row in
                          _by_batch(data.get("draft_width_ms") or {}, "draft_width_ms").items() if row}
                for b, ms in _by_batch(draft if draft is not None else {}, "draft_ms").items():
                    if ms and float(ms) > 0 and 1 not in widths.get(b, {}):
                        widths.setdefault(b, {})[1] = float(ms)
            overheads = [{int(b): float(v) for b, v in _by_batch(data.get(key) or {}, key).items()}
                         for key in ("overhead_ms", "baseline_overhead_ms")]
            return cls(target, widths, *overheads, dict(data.get("settings") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ConfigError(f"not a latency profile (needs target_ms with n = 1): {err}") from err

    @classmethod
    def from_yaml(cls, path: str | Path) -> LatencyProfile:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


def planner_pass_ms(profile: LatencyProfile, tree: TreeShape, batch_size: int = 1) -> float:
    """Target pass plus draft forwards of one step drafting `tree` at batch size B, in ms, as the profile
    predicts them."""
    costs = profile.step_costs(batch_size)
    return costs.pass_ms * (costs.target_cost(tree.size) + sum(costs.draft_cost(w) for w in level_widths(tree)))


def _prefilled_cache(model: PreTrainedModel, rows: int, prefix_len: int, max_len: int, generator: torch.Generator):
    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    cache = new_cache(model, max_len)
    prefix = torch.randint(0, vocab, (rows, prefix_len), generator=generator).to(device)
    model(input_ids=prefix, cache=cache, use_cache=True)
    return cache


def _timed_pass(model: PreTrainedModel, lean, cache, rows: int, prefix_len: int, n: int, generator: torch.Generator,
                clock: Clock) -> float:
    """Seconds of the engine's target pass over `rows` chains of n tree tokens on top of the cache, then undone."""
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    vocab = model.config.get_text_config().vocab_size
    tokens = torch.randint(0, vocab, (rows, n), generator=generator).to(device)
    flat = flatten(tokens, [tuple(range(-1, n - 1))] * rows, [tuple(range(n))] * rows, [prefix_len] * rows, prefix_len,
                   dtype)
    start = clock()
    target_forward(model, lean, False, (), flat.input_ids, flat.position_ids, flat.attention_mask, cache)
    elapsed = clock() - start
    commit(cache, [prefix_len] * rows, prefix_len, [[] for _ in range(rows)])
    return elapsed


def _timed_draft_levels(drafter, prompts: list[list[int]], widths: Sequence[int], clock: Clock) -> dict[int, float]:
    """Seconds of one draft level expanding w nodes per row (children of the root, the engine's own drafting call)
    for each width, on top of one prefill of the prompts. Between widths the drafter is moved on by one step that
    accepts only the roots (as in decoding); a drafter reading the target's features is prefilled anew instead
    (its prefill is a single layer, and it would need the target's features of the step)."""
    seconds = {}
    drafter.reset(prompts)
    roots = [p[-1] for p in prompts]
    drafter.root_logits(roots)
    for i, width in enumerate(widths):
        if i and getattr(drafter, "wants_target_hidden", False):
            drafter.reset(prompts)
            drafter.root_logits(roots)
        elif i:
            bonuses = [p[i % len(p)] for p in prompts]
            drafter.observe([StepOutcome((0,), (root,), bonus) for root, bonus in zip(roots, bonuses)])
            roots = bonuses
            drafter.root_logits(roots)
        nodes = list(range(1, width + 1))
        requests = [(nodes, [p[j % len(p)] for j in range(width)], [0] * width) for p in prompts]
        start = clock()
        drafter.node_logits(requests)
        seconds[width] = clock() - start
    return seconds


@torch.inference_mode()
def measure_latency(
    target: PreTrainedModel,
    draft: PreTrainedModel | None,
    *,
    batch_sizes: Sequence[int] = (1,),
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
    """Median pass times of the target over B rows of each tree size and of a draft level of each width per row,
    for every batch size, interleaved; with `overheads`, also the engine's per-step work (`measure_overheads`).

    A draft level is timed through the engine's drafter (so an EAGLE head is timed as it drafts, mask building
    included) on top of a prefix_len prefix; `draft_vocab` [S]: a causal-LM draft scoring only those token ids.
    `progress(round)` is called after every round. With `max_seconds`, rounds stop early once that much time has
    passed and at least two were timed.
    """
    batch_sizes = sorted({int(b) for b in batch_sizes})
    sizes = sorted({int(n) for n in sizes} | {1})
    widths = sorted({int(w) for w in draft_widths} | {1}) if draft is not None else []
    if not batch_sizes or batch_sizes[0] < 1 or sizes[0] < 1 or prefix_len < 1 or repeats < 1 or (widths and widths[0] < 1):
        raise ConfigError("batch sizes, tree sizes, draft widths, prefix_len and repeats must be >= 1")
    generator = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    clock = Clock(device)
    max_len = prefix_len + max(sizes + widths) + len(widths) + 2
    caches = {b: _prefilled_cache(target, b, prefix_len, max_len, generator) for b in batch_sizes}
    lean = lean_decoder(target)  # looked up once, as the engine does
    drafters = {b: make_drafter(draft, target, max_len, draft_vocab) for b in batch_sizes} if draft is not None else {}
    vocab = target.config.get_text_config().vocab_size
    prompts = torch.randint(0, vocab, (max(batch_sizes), prefix_len), generator=generator).tolist()
    samples: dict[int, dict[int, list[float]]] = {b: {n: [] for n in sizes} for b in batch_sizes}
    draft_samples: dict[int, dict[int, list[float]]] = {b: {w: [] for w in widths} for b in batch_sizes}
    start = time.perf_counter()
    for rep in range(warmup + repeats):
        if max_seconds is not None and rep - warmup >= 2 and time.perf_counter() - start > max_seconds:
            break
        for b in batch_sizes:
            for n in sizes:
                elapsed = _timed_pass(target, lean, caches[b], b, prefix_len, n, generator, clock)
                if rep >= warmup:
                    samples[b][n].append(elapsed)
            if b in drafters:
                for w, elapsed in _timed_draft_levels(drafters[b], prompts[:b], widths, clock).items():
                    if rep >= warmup:
                        draft_samples[b][w].append(elapsed)
        if progress is not None:
            progress(rep)
    info = {"device": str(device), "dtype": str(next(target.parameters()).dtype).replace("torch.", ""),
            "prefix_len": prefix_len, "repeats": len(samples[batch_sizes[0]][1]), "threads": torch.get_num_threads(),
            **(settings or {})}
    if draft is not None:
        weights = draft if isinstance(draft, torch.nn.Module) else target  # a layer-skip draft is the target itself
        info.setdefault("draft_dtype", str(next(weights.parameters()).dtype).replace("torch.", ""))
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    profile = LatencyProfile(
        {b: {n: 1000 * statistics.median(v) for n, v in row.items()} for b, row in samples.items()},
        {b: {w: 1000 * statistics.median(v) for w, v in row.items()} for b, row in draft_samples.items() if widths},
        settings=info)
    if overheads:
        measured = {b: measure_overheads(target, draft, profile, b, prefix_len=prefix_len, seed=seed,
                                         draft_vocab=draft_vocab) for b in batch_sizes}
        profile = replace(profile, overhead_ms={b: o for b, (o, _) in measured.items()},
                          baseline_overhead_ms={b: o1 for b, (_, o1) in measured.items()})
    return profile


@torch.inference_mode()
def measure_overheads(target: PreTrainedModel, draft: PreTrainedModel | None, profile: LatencyProfile,
                      batch_size: int = 1, *, prefix_len: int = 400, steps: int = 24, seed: int = 0,
                      draft_vocab: torch.Tensor | None = None) -> tuple[float, float]:
    """(o_B, o_B,1) in ms: the engine's own work per step at batch size B. Each of `steps` rounds times one step of
    the engine drafting a chain of 2 (speculative), one autoregressive step and one bare 1-token target pass over B
    rows beside them. In units of that round's bare pass, a round's o is its speculative step less the passes
    `profile` prices for that step (in units of the profile's t_B(1)), its o_1 its autoregressive step less 1; their
    medians over rounds, times the profile's t_B(1), are in the profile's milliseconds. Measuring against a pass of
    the same round keeps the machine's drift out: a step less passes measured minutes before gave o from 2.0 to 6.1 ms
    and o_1 from 0.5 to 2.1 ms in six calls of one process, against 2.4 to 3.2 and 0.6 to 0.7 ms this way (24 rounds;
    the default pair, [Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07). Random
    prompts make acceptance rare and no row stops early (no EOS), so every step runs all B rows and drafts the whole
    chain; each decoder's first step (a draft's catch-up on the prompt) is left out."""
    generator = torch.Generator().manual_seed(seed + 1)
    vocab = target.config.get_text_config().vocab_size
    prompts = torch.randint(0, vocab, (batch_size, prefix_len), generator=generator).tolist()
    device = next(target.parameters()).device
    clock = Clock(device)
    max_length = prefix_len + 3 * (steps + 1) + 1

    def decoder(tree) -> Decoder:
        drafter = make_drafter(draft, target, max_length, draft_vocab) if tree is not None else None
        return Decoder(target, drafter, prompts, policy=as_policy(tree), sampling=SamplingConfig(),
                       max_new_tokens=3 * (steps + 1), generators=generators(seed, batch_size, device), eos=(),
                       max_length=max_length)

    def timed_step(decoding: Decoder) -> float:
        start = clock()
        decoding.step()
        return 1000 * (clock() - start)

    bare_cache = _prefilled_cache(target, batch_size, prefix_len, prefix_len + 2, generator)
    lean = lean_decoder(target)
    speculative = decoder(chain(2)) if draft is not None else None
    autoregressive = decoder(None)
    for decoding in (speculative, autoregressive):
        if decoding is not None:
            decoding.step()
    unit = profile.pass_ms(batch_size)
    priced = planner_pass_ms(profile, chain(2), batch_size) / unit  # in units of t_B(1)
    overheads, baselines = [], []  # in units of each round's bare pass
    for _ in range(steps):
        step = timed_step(speculative) if speculative is not None else None
        step_1 = timed_step(autoregressive)
        bare = 1000 * _timed_pass(target, lean, bare_cache, batch_size, prefix_len, 1, generator, clock)
        baselines.append(step_1 / bare - 1)
        if step is not None:
            overheads.append(step / bare - priced)
    overhead = max(0.0, unit * statistics.median(overheads)) if overheads else 0.0
    return overhead, max(0.0, unit * statistics.median(baselines))
